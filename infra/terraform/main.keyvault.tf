resource "azurerm_key_vault" "this" {
  name                          = local.names.key_vault
  resource_group_name           = azurerm_resource_group.this.name
  location                      = azurerm_resource_group.this.location
  tenant_id                     = data.azurerm_client_config.current.tenant_id
  sku_name                      = "standard"
  enable_rbac_authorization     = true
  purge_protection_enabled      = true
  soft_delete_retention_days    = 90
  public_network_access_enabled = true
  tags                          = local.common_tags

  network_acls {
    # App Service Key Vault references resolve from shared outbound IPs; see docs/deploy.md.
    default_action = "Allow"
    bypass         = "AzureServices"
  }
}

resource "random_password" "admin_key" {
  length  = 48
  special = false
}

resource "azurerm_key_vault_secret" "admin_key" {
  # Key Vault names allow letters, digits and dashes only; the app setting is WEFT_ADMIN_KEY.
  name            = "weft-admin-key"
  value           = random_password.admin_key.result
  key_vault_id    = azurerm_key_vault.this.id
  content_type    = "text/plain"
  expiration_date = var.admin_key_expiration

  depends_on = [azurerm_role_assignment.deployer]
}
