data "azurerm_client_config" "current" {}

resource "random_string" "suffix" {
  length  = 5
  lower   = true
  upper   = false
  numeric = true
  special = false
}

resource "azurerm_resource_group" "this" {
  name     = local.names.resource_group
  location = var.location
  tags     = local.common_tags
}

# One user-assigned identity for the whole app: it exists before the Function App, so every
# role assignment is in place by the time the host first starts.
resource "azurerm_user_assigned_identity" "this" {
  name                = local.names.identity
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  tags                = local.common_tags
}
