resource "azurerm_log_analytics_workspace" "this" {
  name                = local.names.log_analytics
  resource_group_name = azurerm_resource_group.this.name
  location            = azurerm_resource_group.this.location
  sku                 = "PerGB2018"
  retention_in_days   = var.log_retention_days
  tags                = local.common_tags
}

resource "azurerm_application_insights" "this" {
  name                = local.names.app_insights
  resource_group_name = azurerm_resource_group.this.name
  location            = azurerm_resource_group.this.location
  workspace_id        = azurerm_log_analytics_workspace.this.id
  application_type    = "other"
  # Ingestion only with an Entra token (APPLICATIONINSIGHTS_AUTHENTICATION_STRING), so the
  # instrumentation key in the connection string is not a credential.
  local_authentication_disabled = true
  tags                          = local.common_tags
}

resource "azurerm_monitor_action_group" "this" {
  name                = local.names.action_group
  resource_group_name = azurerm_resource_group.this.name
  short_name          = substr("weft${var.environment}", 0, 12)
  tags                = local.common_tags

  dynamic "email_receiver" {
    for_each = var.alert_email == "" ? [] : [var.alert_email]
    content {
      name                    = "operators"
      email_address           = email_receiver.value
      use_common_alert_schema = true
    }
  }
}

locals {
  # Log alerts over Application Insights. The queries live in infra/monitoring/alerts/ and use
  # only names from shared/telemetry.py (tests/infra/test_monitoring.py checks).
  log_alerts = {
    dead-letters-opened = {
      description = "A task was dead-lettered after exhausting its retries."
      severity    = 2
      measure     = "opened"
      aggregation = "Total"
      operator    = "GreaterThan"
      threshold   = 0
      dimensions  = ["tenant", "workflow"]
    }
    failed-executions-rate = {
      description = "More than 5% of finished executions failed in the last 15 minutes."
      severity    = 2
      measure     = "failed_pct"
      aggregation = "Maximum"
      operator    = "GreaterThan"
      threshold   = 5
      dimensions  = []
    }
    scheduling-latency-p95 = {
      description = "p95 task scheduling latency is above the 1 s target."
      severity    = 2
      measure     = "p95_ms"
      aggregation = "Maximum"
      operator    = "GreaterThan"
      threshold   = 1000
      dimensions  = []
    }
    function-errors = {
      description = "Function invocations are failing."
      severity    = 1
      measure     = "failures"
      aggregation = "Total"
      operator    = "GreaterThan"
      threshold   = 5
      dimensions  = ["operation_Name"]
    }
  }
}

resource "azurerm_monitor_scheduled_query_rules_alert_v2" "this" {
  for_each             = local.log_alerts
  name                 = "alert-${local.base_name}-${each.key}"
  resource_group_name  = azurerm_resource_group.this.name
  location             = azurerm_resource_group.this.location
  description          = each.value.description
  severity             = each.value.severity
  scopes               = [azurerm_application_insights.this.id]
  evaluation_frequency = "PT5M"
  window_duration      = "PT15M"
  enabled              = true
  tags                 = local.common_tags

  criteria {
    query                   = file("${path.module}/../monitoring/alerts/${each.key}.kql")
    time_aggregation_method = each.value.aggregation
    metric_measure_column   = each.value.measure
    operator                = each.value.operator
    threshold               = each.value.threshold

    dynamic "dimension" {
      for_each = each.value.dimensions
      content {
        name     = dimension.value
        operator = "Include"
        values   = ["*"]
      }
    }

    failing_periods {
      minimum_failing_periods_to_trigger_alert = 1
      number_of_evaluation_periods             = 1
    }
  }

  action {
    action_groups = [azurerm_monitor_action_group.this.id]
  }
}

# Service Bus dead-letter count (submissions that could not be processed, event subscribers
# that gave up): a platform metric, so it needs no query.
resource "azurerm_monitor_metric_alert" "servicebus_dead_letters" {
  name                = "alert-${local.base_name}-servicebus-dead-letters"
  resource_group_name = azurerm_resource_group.this.name
  scopes              = [azurerm_servicebus_namespace.this.id]
  description         = "Messages are sitting in a Service Bus dead-letter subqueue."
  severity            = 2
  frequency           = "PT5M"
  window_size         = "PT15M"
  tags                = local.common_tags

  criteria {
    metric_namespace = "Microsoft.ServiceBus/namespaces"
    metric_name      = "DeadletteredMessages"
    aggregation      = "Maximum"
    operator         = "GreaterThan"
    threshold        = 0

    dimension {
      name     = "EntityName"
      operator = "Include"
      values   = ["*"]
    }
  }

  action {
    action_group_id = azurerm_monitor_action_group.this.id
  }
}

# Rejected submissions wait in `submissions-rejected` for an operator.
resource "azurerm_monitor_metric_alert" "servicebus_rejected_submissions" {
  name                = "alert-${local.base_name}-rejected-submissions"
  resource_group_name = azurerm_resource_group.this.name
  scopes              = [azurerm_servicebus_namespace.this.id]
  description         = "Submissions were rejected (invalid body, unknown tenant or workflow) and wait in submissions-rejected."
  severity            = 3
  frequency           = "PT5M"
  window_size         = "PT15M"
  tags                = local.common_tags

  criteria {
    metric_namespace = "Microsoft.ServiceBus/namespaces"
    metric_name      = "ActiveMessages"
    aggregation      = "Maximum"
    operator         = "GreaterThan"
    threshold        = 0

    dimension {
      name     = "EntityName"
      operator = "Include"
      values   = [azurerm_servicebus_queue.submissions_rejected.name]
    }
  }

  action {
    action_group_id = azurerm_monitor_action_group.this.id
  }
}

resource "random_uuid" "workbook" {}

resource "azurerm_application_insights_workbook" "this" {
  name                = random_uuid.workbook.result
  resource_group_name = azurerm_resource_group.this.name
  location            = azurerm_resource_group.this.location
  display_name        = "Weft operations (${var.environment})"
  source_id           = lower(azurerm_application_insights.this.id)
  category            = "workbook"
  data_json           = replace(file("${path.module}/../monitoring/workbook.json"), "__APP_INSIGHTS_ID__", azurerm_application_insights.this.id)
  tags                = local.common_tags
}

# Platform logs and metrics of the managed services, next to the app telemetry.
resource "azurerm_monitor_diagnostic_setting" "this" {
  for_each = {
    servicebus = azurerm_servicebus_namespace.this.id
    key_vault  = azurerm_key_vault.this.id
    cosmos     = azurerm_cosmosdb_account.this.id
  }
  name                       = "diag-${each.key}"
  target_resource_id         = each.value
  log_analytics_workspace_id = azurerm_log_analytics_workspace.this.id

  enabled_log {
    category_group = "allLogs"
  }

  metric {
    category = "AllMetrics"
  }
}
