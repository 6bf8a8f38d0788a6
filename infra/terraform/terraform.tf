# Provider pins (Azure Verified Modules layout: versions here, providers configured below).
terraform {
  required_version = ">= 1.9, < 2.0"

  required_providers {
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "~> 4.20"
    }
    azapi = {
      source  = "Azure/azapi"
      version = "~> 2.2"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.6"
    }
  }
}

provider "azurerm" {
  features {
    key_vault {
      # The admin key secret must survive a `terraform destroy` of the app by mistake.
      purge_soft_delete_on_destroy = false
    }
  }
  # Shared keys are disabled on the storage account, so any data-plane call the provider makes
  # must use Entra ID rather than fall back to an account key.
  storage_use_azuread = true
}

provider "azapi" {}
