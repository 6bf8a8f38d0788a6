# Optional managed backend for Durable Functions (durable_backend = durable_task_scheduler).
# Sizing (docs/deploy.md, "Durable backend"): peak 4,650 actions/s (worst case) / 2,000 per CU = 2.3 -> 3 CU.
resource "azapi_resource" "durable_scheduler" {
  count     = local.use_dts ? 1 : 0
  type      = "Microsoft.DurableTask/schedulers@2025-11-01"
  name      = local.names.scheduler
  parent_id = azurerm_resource_group.this.id
  location  = azurerm_resource_group.this.location
  tags      = local.common_tags

  body = {
    properties = {
      # Function App outbound addresses are shared and change with scale; access is
      # Entra-only (Durable Task Data Contributor), not by network.
      ipAllowlist = ["0.0.0.0/0"]
      sku = {
        name     = "Dedicated"
        capacity = var.durable_task_scheduler_capacity
      }
    }
  }

  response_export_values = ["properties.endpoint"]
}

resource "azapi_resource" "durable_taskhub" {
  count     = local.use_dts ? 1 : 0
  type      = "Microsoft.DurableTask/schedulers/taskHubs@2025-11-01"
  name      = local.task_hub_name
  parent_id = azapi_resource.durable_scheduler[0].id
  body = {
    properties = {}
  }
}
