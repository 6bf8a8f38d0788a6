"""The Functions entry point. It only wires the blueprints together."""

import azure.durable_functions as df
import azure.functions as func

import activities
import entities
import orchestrators
import triggers

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
for _blueprint in (orchestrators.bp, activities.bp, entities.bp, triggers.bp):
    app.register_functions(_blueprint)
