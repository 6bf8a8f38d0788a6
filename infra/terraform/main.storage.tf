resource "azurerm_storage_account" "this" {
  name                            = local.names.storage_account
  resource_group_name             = azurerm_resource_group.this.name
  location                        = azurerm_resource_group.this.location
  account_kind                    = "StorageV2"
  account_tier                    = "Standard"
  account_replication_type        = var.zone_redundant ? "ZRS" : "LRS"
  shared_access_key_enabled       = false
  default_to_oauth_authentication = true
  local_user_enabled              = false
  min_tls_version                 = "TLS1_2"
  https_traffic_only_enabled      = true
  allow_nested_items_to_be_public = false
  tags                            = local.common_tags

  blob_properties {
    delete_retention_policy {
      days = 7
    }
    container_delete_retention_policy {
      days = 7
    }
  }

  # Keys are off, so only user-delegation SAS exist; keep any that are issued short-lived.
  sas_policy {
    expiration_period = "00.01:00:00"
    expiration_action = "Log"
  }
}

# Created through Resource Manager (storage_account_id), not the blob data plane, so
# `terraform apply` needs no data-plane role of its own to create them.
resource "azurerm_storage_container" "this" {
  for_each              = toset(local.blob_containers)
  name                  = each.key
  storage_account_id    = azurerm_storage_account.this.id
  container_access_type = "private"
}

# Dropped files and claim-checked payloads are transient: keep the account from growing forever.
resource "azurerm_storage_management_policy" "this" {
  storage_account_id = azurerm_storage_account.this.id

  rule {
    name    = "expire-incoming"
    enabled = true
    filters {
      prefix_match = ["incoming/"]
      blob_types   = ["blockBlob"]
    }
    actions {
      base_blob {
        delete_after_days_since_modification_greater_than = 30
      }
    }
  }

  rule {
    name    = "expire-payloads"
    enabled = true
    filters {
      prefix_match = ["payloads/"]
      blob_types   = ["blockBlob"]
    }
    actions {
      base_blob {
        delete_after_days_since_modification_greater_than = 90
      }
    }
  }
}
