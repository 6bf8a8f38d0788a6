resource "azurerm_cosmosdb_account" "this" {
  name                               = local.names.cosmos_account
  resource_group_name                = azurerm_resource_group.this.name
  location                           = azurerm_resource_group.this.location
  offer_type                         = "Standard"
  kind                               = "GlobalDocumentDB"
  local_authentication_disabled      = true
  access_key_metadata_writes_enabled = false
  public_network_access_enabled      = true
  automatic_failover_enabled         = false
  minimal_tls_version                = "Tls12"
  tags                               = local.common_tags

  consistency_policy {
    # Session: a client reads its own writes (submit, then GET status) at the cost of one region.
    consistency_level = "Session"
  }

  geo_location {
    location          = azurerm_resource_group.this.location
    failover_priority = 0
    zone_redundant    = var.zone_redundant && !local.serverless
  }

  dynamic "capabilities" {
    for_each = local.serverless ? ["EnableServerless"] : []
    content {
      name = capabilities.value
    }
  }

  # Point-in-time restore with second granularity: covers the design's 5-minute RPO.
  backup {
    type = "Continuous"
    tier = "Continuous7Days"
  }
}

resource "azurerm_cosmosdb_sql_database" "this" {
  name                = local.cosmos_database
  resource_group_name = azurerm_resource_group.this.name
  account_name        = azurerm_cosmosdb_account.this.name
}

resource "azurerm_cosmosdb_sql_container" "this" {
  for_each              = local.cosmos_containers
  name                  = each.key
  resource_group_name   = azurerm_resource_group.this.name
  account_name          = azurerm_cosmosdb_account.this.name
  database_name         = azurerm_cosmosdb_sql_database.this.name
  partition_key_paths   = [each.value.partition_key]
  partition_key_version = 2
  default_ttl           = each.value.default_ttl

  dynamic "autoscale_settings" {
    for_each = local.serverless ? [] : [lookup(var.cosmos_autoscale_max_throughput, each.key, 1000)]
    content {
      max_throughput = autoscale_settings.value
    }
  }

  indexing_policy {
    indexing_mode = "consistent"

    dynamic "included_path" {
      for_each = each.value.included_paths
      content {
        path = included_path.value
      }
    }

    dynamic "excluded_path" {
      for_each = each.value.excluded_paths
      content {
        path = excluded_path.value
      }
    }

    dynamic "composite_index" {
      for_each = each.value.composite_indexes
      content {
        dynamic "index" {
          for_each = composite_index.value
          content {
            path  = index.value.path
            order = index.value.order
          }
        }
      }
    }
  }
}
