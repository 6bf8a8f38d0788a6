resource "azurerm_servicebus_namespace" "this" {
  name                          = local.names.servicebus
  resource_group_name           = azurerm_resource_group.this.name
  location                      = azurerm_resource_group.this.location
  sku                           = var.servicebus_sku
  capacity                      = var.servicebus_sku == "Premium" ? 1 : 0
  premium_messaging_partitions  = var.servicebus_sku == "Premium" ? 1 : 0
  local_auth_enabled            = false
  minimum_tls_version           = "1.2"
  public_network_access_enabled = true
  tags                          = local.common_tags

  # Lets the namespace reach Key Vault if customer-managed keys are turned on later.
  identity {
    type         = "UserAssigned"
    identity_ids = [azurerm_user_assigned_identity.this.id]
  }
}

# Submissions from other systems ({tenant, workflow, version?, input?}); the trigger takes the
# idempotency key from the message id, and duplicate detection drops a re-send before that.
resource "azurerm_servicebus_queue" "submissions" {
  name                                    = "submissions"
  namespace_id                            = azurerm_servicebus_namespace.this.id
  max_delivery_count                      = var.servicebus_max_delivery_count
  dead_lettering_on_message_expiration    = true
  lock_duration                           = "PT1M"
  default_message_ttl                     = "P14D"
  requires_duplicate_detection            = true
  duplicate_detection_history_time_window = "PT10M"
  max_size_in_megabytes                   = 1024
}

# Poison submissions (bad body, unknown tenant/workflow, reused message id): the trigger copies
# them here with DeadLetterReason/DeadLetterErrorDescription properties and completes the
# original (shared/intake.py), because the Python worker cannot dead-letter a message itself.
# Copies keep the original message id: duplicate detection drops the copy of a redelivery.
resource "azurerm_servicebus_queue" "submissions_rejected" {
  name                                    = "submissions-rejected"
  namespace_id                            = azurerm_servicebus_namespace.this.id
  max_delivery_count                      = 10
  dead_lettering_on_message_expiration    = false
  lock_duration                           = "PT1M"
  default_message_ttl                     = "P14D"
  requires_duplicate_detection            = true
  duplicate_detection_history_time_window = "PT10M"
  max_size_in_megabytes                   = 1024
}

# Lifecycle events from the outbox relay. The relay sets message_id = outbox record id, so a
# re-send after a crash between publish and mark-dispatched is dropped here.
resource "azurerm_servicebus_topic" "workflow_events" {
  name                                    = "workflow-events"
  namespace_id                            = azurerm_servicebus_namespace.this.id
  requires_duplicate_detection            = true
  duplicate_detection_history_time_window = "PT1H"
  default_message_ttl                     = "P7D"
  support_ordering                        = true
  max_size_in_megabytes                   = 1024
}

# A subscription that receives every event, for operators (Service Bus Explorer in the Portal)
# and smoke tests. Consumers that act on events get their own subscription.
resource "azurerm_servicebus_subscription" "operators" {
  name                                 = "operators"
  topic_id                             = azurerm_servicebus_topic.workflow_events.id
  max_delivery_count                   = 10
  default_message_ttl                  = "P1D"
  dead_lettering_on_message_expiration = false
  lock_duration                        = "PT1M"
}
