# Elastic Premium, not Flex Consumption: docs/deploy.md, "Why Elastic Premium".
resource "azurerm_service_plan" "this" {
  name                         = local.names.plan
  resource_group_name          = azurerm_resource_group.this.name
  location                     = azurerm_resource_group.this.location
  os_type                      = "Linux"
  sku_name                     = var.function_plan_sku
  worker_count                 = var.zone_redundant ? max(3, var.function_min_instances) : var.function_min_instances
  maximum_elastic_worker_count = var.function_max_instances
  zone_balancing_enabled       = var.zone_redundant
  tags                         = local.common_tags
}

resource "azurerm_linux_function_app" "this" {
  name                            = local.names.function_app
  resource_group_name             = azurerm_resource_group.this.name
  location                        = azurerm_resource_group.this.location
  service_plan_id                 = azurerm_service_plan.this.id
  functions_extension_version     = "~4"
  https_only                      = true
  public_network_access_enabled   = true
  builtin_logging_enabled         = false
  client_certificate_enabled      = false
  key_vault_reference_identity_id = azurerm_user_assigned_identity.this.id
  tags                            = local.common_tags

  # Host storage by identity. The provider writes AzureWebJobsStorage__accountName from these
  # (the same value local.app_settings carries, with __credential and __clientId for the
  # user-assigned identity), and no Azure Files content share: it would need an account key.
  storage_account_name          = azurerm_storage_account.this.name
  storage_uses_managed_identity = true
  content_share_force_disabled  = true

  identity {
    type         = "UserAssigned"
    identity_ids = [azurerm_user_assigned_identity.this.id]
  }

  site_config {
    application_stack {
      python_version = "3.11"
    }
    # The provider manages this setting through site_config; the same value is in app_settings.
    application_insights_connection_string = azurerm_application_insights.this.connection_string
    elastic_instance_minimum               = var.function_min_instances
    pre_warmed_instance_count              = var.function_min_instances
    app_scale_limit                        = var.function_max_instances
    runtime_scale_monitoring_enabled       = true
    http2_enabled                          = true
    ftps_state                             = "Disabled"
    minimum_tls_version                    = "1.2"
    scm_minimum_tls_version                = "1.2"
    health_check_path                      = "/api/v1/health"
    health_check_eviction_time_in_min      = 5
  }

  app_settings = merge(local.app_settings, local.use_dts ? local.durable_task_scheduler_app_settings : {})

  # Host start-up reads storage, Service Bus, Cosmos and Key Vault as the identity.
  depends_on = [
    azurerm_role_assignment.identity,
    azurerm_cosmosdb_sql_role_assignment.identity,
    azurerm_role_assignment.durable_scheduler,
    azurerm_storage_container.this,
  ]
}
