resource "azurerm_role_assignment" "identity" {
  for_each                         = local.identity_roles
  scope                            = each.value.scope
  role_definition_name             = each.value.role
  principal_id                     = azurerm_user_assigned_identity.this.principal_id
  principal_type                   = "ServicePrincipal"
  skip_service_principal_aad_check = true
}

# Cosmos DB data plane uses its own RBAC: built-in "Cosmos DB Built-in Data Contributor".
resource "azurerm_cosmosdb_sql_role_assignment" "identity" {
  resource_group_name = azurerm_resource_group.this.name
  account_name        = azurerm_cosmosdb_account.this.name
  role_definition_id  = "${azurerm_cosmosdb_account.this.id}/sqlRoleDefinitions/00000000-0000-0000-0000-000000000002"
  principal_id        = azurerm_user_assigned_identity.this.principal_id
  scope               = azurerm_cosmosdb_account.this.id
}

resource "azurerm_role_assignment" "durable_scheduler" {
  count                            = local.use_dts ? 1 : 0
  scope                            = azapi_resource.durable_scheduler[0].id
  role_definition_name             = "Durable Task Data Contributor"
  principal_id                     = azurerm_user_assigned_identity.this.principal_id
  principal_type                   = "ServicePrincipal"
  skip_service_principal_aad_check = true
}

resource "azurerm_role_assignment" "deployer" {
  for_each             = local.deployer_roles
  scope                = each.value.scope
  role_definition_name = each.value.role
  principal_id         = data.azurerm_client_config.current.object_id
}

resource "azurerm_role_assignment" "operators" {
  for_each             = local.operator_assignments
  scope                = each.value.scope
  role_definition_name = each.value.role
  principal_id         = each.value.principal_id
}

# Cosmos DB Built-in Data Reader, so Data Explorer in the Portal can show executions.
resource "azurerm_cosmosdb_sql_role_assignment" "operators" {
  for_each            = toset(var.operator_object_ids)
  resource_group_name = azurerm_resource_group.this.name
  account_name        = azurerm_cosmosdb_account.this.name
  role_definition_id  = "${azurerm_cosmosdb_account.this.id}/sqlRoleDefinitions/00000000-0000-0000-0000-000000000001"
  principal_id        = each.value
  scope               = azurerm_cosmosdb_account.this.id
}

resource "azurerm_role_assignment" "operators_durable_scheduler" {
  for_each             = local.use_dts ? toset(var.operator_object_ids) : toset([])
  scope                = azapi_resource.durable_scheduler[0].id
  role_definition_name = "Durable Task Data Reader"
  principal_id         = each.value
}
