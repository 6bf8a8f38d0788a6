output "function_app_url" {
  description = "Base URL of the Function App; the API is under /api/v1."
  value       = "https://${azurerm_linux_function_app.this.default_hostname}"
}

output "api_base_url" {
  description = "Base URL of the Weft API (v1)."
  value       = "https://${azurerm_linux_function_app.this.default_hostname}/api/v1"
}

output "resource_names" {
  description = "Names of the deployed resources, for az CLI commands and the Portal."
  value = {
    resource_group          = azurerm_resource_group.this.name
    function_app            = azurerm_linux_function_app.this.name
    service_plan            = azurerm_service_plan.this.name
    storage_account         = azurerm_storage_account.this.name
    cosmos_account          = azurerm_cosmosdb_account.this.name
    cosmos_database         = azurerm_cosmosdb_sql_database.this.name
    servicebus_namespace    = azurerm_servicebus_namespace.this.name
    key_vault               = azurerm_key_vault.this.name
    application_insights    = azurerm_application_insights.this.name
    log_analytics_workspace = azurerm_log_analytics_workspace.this.name
    workbook                = azurerm_application_insights_workbook.this.display_name
    task_hub                = local.task_hub_name
    durable_task_scheduler  = local.use_dts ? azapi_resource.durable_scheduler[0].name : null
  }
}

output "identity_client_id" {
  description = "Client id of the app's user-assigned managed identity (AZURE_CLIENT_ID)."
  value       = azurerm_user_assigned_identity.this.client_id
}

output "identity_principal_id" {
  description = "Object (principal) id of the app's user-assigned managed identity, for extra role assignments."
  value       = azurerm_user_assigned_identity.this.principal_id
}

output "package_url" {
  description = "Blob the Function App runs from (WEBSITE_RUN_FROM_PACKAGE); upload the zip here to deploy."
  value       = local.package_url
}

output "admin_key_secret_id" {
  description = "Key Vault secret holding WEFT_ADMIN_KEY (read it with az keyvault secret show --id)."
  value       = azurerm_key_vault_secret.admin_key.versionless_id
}

output "durable_task_scheduler_endpoint" {
  description = "Durable Task Scheduler endpoint, when durable_backend = durable_task_scheduler."
  value       = local.use_dts ? azapi_resource.durable_scheduler[0].output.properties.endpoint : null
}
