variable "name_prefix" {
  type        = string
  description = "Short prefix for every resource name (3-8 lowercase letters or digits, starting with a letter)."
  default     = "weft"

  validation {
    condition     = can(regex("^[a-z][a-z0-9]{2,7}$", var.name_prefix))
    error_message = "name_prefix must be 3-8 lowercase letters or digits and start with a letter (storage account names allow nothing else)."
  }
}

variable "environment" {
  type        = string
  description = "Deployment environment; part of every resource name and a tag."
  default     = "dev"

  validation {
    condition     = contains(["dev", "test", "prod"], var.environment)
    error_message = "environment must be one of dev, test, prod."
  }
}

variable "location" {
  type        = string
  description = "Azure region for every resource, e.g. westeurope. Pick a region with availability zones and Durable Task Scheduler if you use it."
  default     = "westeurope"

  validation {
    condition     = can(regex("^[a-z]+[a-z0-9]*$", var.location))
    error_message = "location must be an Azure region name in lowercase without spaces, e.g. westeurope or eastus2."
  }
}

variable "tags" {
  type        = map(string)
  description = "Extra tags added to every resource."
  default     = {}

  validation {
    condition     = alltrue([for k, v in var.tags : length(k) <= 512 && length(v) <= 256])
    error_message = "Tag names must be at most 512 characters and values at most 256."
  }
}

variable "cosmos_throughput_mode" {
  type        = string
  description = "Cosmos DB capacity mode: serverless (pay per request; dev and small tenants) or autoscale (provisioned, needed for the design's 900 tasks/s peak)."
  default     = "serverless"

  validation {
    condition     = contains(["serverless", "autoscale"], var.cosmos_throughput_mode)
    error_message = "cosmos_throughput_mode must be serverless or autoscale."
  }
}

variable "cosmos_autoscale_max_throughput" {
  type        = map(number)
  description = "Autoscale maximum RU/s per container (used only when cosmos_throughput_mode = autoscale). See docs/deploy.md, capacity model."
  default = {
    executions  = 80000
    definitions = 1000
    tenants     = 1000
    leases      = 1000
    idempotency = 10000
  }

  validation {
    condition     = alltrue([for v in values(var.cosmos_autoscale_max_throughput) : v >= 1000 && v % 1000 == 0])
    error_message = "Autoscale maximum throughput must be a multiple of 1000 RU/s and at least 1000."
  }
}

variable "durable_backend" {
  type        = string
  description = "Durable Functions storage backend: azure_storage (default, cheapest; about 830 work items/s on 4 EP2) or durable_task_scheduler (managed; about 2,000 actions/s per capacity unit)."
  default     = "azure_storage"

  validation {
    condition     = contains(["azure_storage", "durable_task_scheduler"], var.durable_backend)
    error_message = "durable_backend must be azure_storage or durable_task_scheduler."
  }
}

variable "durable_task_scheduler_capacity" {
  type        = number
  description = "Capacity units of the Dedicated Durable Task Scheduler (only with durable_backend = durable_task_scheduler). 3 CU = 6,000 actions/s for a worst-case 4,650 actions/s peak; see docs/deploy.md."
  default     = 3

  validation {
    condition     = var.durable_task_scheduler_capacity >= 1 && var.durable_task_scheduler_capacity <= 10 && floor(var.durable_task_scheduler_capacity) == var.durable_task_scheduler_capacity
    error_message = "durable_task_scheduler_capacity must be a whole number from 1 to 10."
  }
}

variable "function_plan_sku" {
  type        = string
  description = "Elastic Premium plan SKU for the Function App (EP1 = 1 vCPU/3.5 GB, EP2 = 2 vCPU/7 GB, EP3 = 4 vCPU/14 GB)."
  default     = "EP2"

  validation {
    condition     = contains(["EP1", "EP2", "EP3"], var.function_plan_sku)
    error_message = "function_plan_sku must be EP1, EP2 or EP3."
  }
}

variable "function_min_instances" {
  type        = number
  description = "Always-ready (pre-warmed) instances of the Elastic Premium plan. At least 1 keeps scheduling latency free of cold starts; use 3 in prod for zone redundancy."
  default     = 1

  validation {
    condition     = var.function_min_instances >= 1 && var.function_min_instances <= 20
    error_message = "function_min_instances must be between 1 and 20."
  }
}

variable "function_max_instances" {
  type        = number
  description = "Maximum burst instances (maximum_elastic_worker_count) of the Elastic Premium plan."
  default     = 20

  validation {
    condition     = var.function_max_instances >= 1 && var.function_max_instances <= 100
    error_message = "function_max_instances must be between 1 and 100."
  }
}

variable "zone_redundant" {
  type        = bool
  description = "Spread the Function plan, Cosmos DB and Service Bus over availability zones (the design's RTO/RPO assume it in prod). Needs at least 3 plan instances."
  default     = false

  validation {
    condition     = var.zone_redundant == true || var.zone_redundant == false
    error_message = "zone_redundant must be true or false."
  }
}

variable "servicebus_sku" {
  type        = string
  description = "Service Bus tier. Standard suffices for topics and duplicate detection; Premium adds isolation, zones and predictable latency."
  default     = "Standard"

  validation {
    condition     = contains(["Standard", "Premium"], var.servicebus_sku)
    error_message = "servicebus_sku must be Standard or Premium (Basic has no topics)."
  }
}

variable "servicebus_max_delivery_count" {
  type        = number
  description = "Deliveries of a `submissions` message before Service Bus dead-letters it."
  default     = 5

  validation {
    condition     = var.servicebus_max_delivery_count >= 1 && var.servicebus_max_delivery_count <= 100
    error_message = "servicebus_max_delivery_count must be between 1 and 100."
  }
}

variable "log_retention_days" {
  type        = number
  description = "Log Analytics / Application Insights retention in days."
  default     = 30

  validation {
    condition     = contains([30, 60, 90, 120, 180, 270, 365, 550, 730], var.log_retention_days)
    error_message = "log_retention_days must be one of 30, 60, 90, 120, 180, 270, 365, 550, 730."
  }
}

variable "alert_email" {
  type        = string
  description = "E-mail address the alert action group notifies; empty for no e-mail receiver."
  default     = ""

  validation {
    condition     = var.alert_email == "" || can(regex("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", var.alert_email))
    error_message = "alert_email must be empty or an e-mail address."
  }
}

variable "admin_key_expiration" {
  type        = string
  description = "RFC 3339 expiry of the WEFT_ADMIN_KEY secret in Key Vault; rotate (new value, new date) before it passes."
  default     = "2027-12-31T00:00:00Z"

  validation {
    condition     = can(formatdate("YYYY", var.admin_key_expiration))
    error_message = "admin_key_expiration must be an RFC 3339 timestamp, e.g. 2027-12-31T00:00:00Z."
  }
}

variable "operator_object_ids" {
  type        = list(string)
  description = "Entra object ids (users or groups) that operate Weft in the Portal: read access to Cosmos data, task hub state, blobs, Service Bus messages and monitoring. Local auth is off everywhere, so the Portal's data views need these roles."
  default     = []

  validation {
    condition     = alltrue([for id in var.operator_object_ids : can(regex("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", id))])
    error_message = "operator_object_ids must be Entra object ids (GUIDs)."
  }
}
