locals {
  suffix      = random_string.suffix.result
  base_name   = "${var.name_prefix}-${var.environment}"
  compact     = "${var.name_prefix}${var.environment}"
  serverless  = var.cosmos_throughput_mode == "serverless"
  use_dts     = var.durable_backend == "durable_task_scheduler"
  common_tags = merge({ app = "weft", environment = var.environment, managed_by = "terraform" }, var.tags)

  names = {
    resource_group  = "rg-${local.base_name}"
    identity        = "id-${local.base_name}"
    storage_account = "st${local.compact}${local.suffix}"
    plan            = "asp-${local.base_name}"
    function_app    = "func-${local.base_name}-${local.suffix}"
    cosmos_account  = "cosmos-${local.base_name}-${local.suffix}"
    servicebus      = "sb-${local.base_name}-${local.suffix}"
    key_vault       = "kv-${local.base_name}-${local.suffix}"
    log_analytics   = "log-${local.base_name}"
    app_insights    = "appi-${local.base_name}"
    action_group    = "ag-${local.base_name}"
    scheduler       = "dts-${local.base_name}-${local.suffix}"
  }

  # Durable task hub: letters and digits only, so it is valid for both backends.
  task_hub_name = "${local.compact}hub"

  cosmos_database = "weft"
  blob_containers = ["incoming", "payloads", "deployments"]
  package_url     = "${azurerm_storage_account.this.primary_blob_endpoint}deployments/weft.zip"
  admin_key_ref   = "@Microsoft.KeyVault(SecretUri=${azurerm_key_vault_secret.admin_key.versionless_id})"

  # Cosmos DB containers, exactly as docs/data-model.md specifies (tests/infra/test_cosmos.py
  # compares them). default_ttl: null = TTL off; -1 = TTL on, but only items that carry their own
  # `ttl` expire (dispatched outbox records, idempotency keys).
  cosmos_containers = {
    executions = {
      partition_key = "/pk"
      default_ttl   = -1
      # Only queried paths are indexed: documents are written far more often than listed.
      included_paths = ["/docType/?", "/tenantId/?", "/workflow/?", "/status/?", "/createdAt/?", "/dispatchedAt/?", "/claimedUntil/?", "/seq/?", "/executionId/?", "/taskId/?", "/deadLetterId/?"]
      excluded_paths = ["/*"]
      composite_indexes = [
        [{ path = "/tenantId", order = "Ascending" }, { path = "/createdAt", order = "Descending" }, { path = "/id", order = "Descending" }],
        [{ path = "/tenantId", order = "Ascending" }, { path = "/status", order = "Ascending" }, { path = "/createdAt", order = "Descending" }, { path = "/id", order = "Descending" }],
        [{ path = "/tenantId", order = "Ascending" }, { path = "/workflow", order = "Ascending" }, { path = "/createdAt", order = "Descending" }, { path = "/id", order = "Descending" }],
        [{ path = "/tenantId", order = "Ascending" }, { path = "/createdAt", order = "Descending" }, { path = "/deadLetterId", order = "Descending" }],
      ]
    }
    definitions = {
      partition_key     = "/tenantId"
      default_ttl       = null
      included_paths    = ["/*"]
      excluded_paths    = []
      composite_indexes = []
    }
    tenants = {
      partition_key     = "/id"
      default_ttl       = null
      included_paths    = ["/*"]
      excluded_paths    = []
      composite_indexes = []
    }
    leases = {
      partition_key     = "/name"
      default_ttl       = null
      included_paths    = ["/*"]
      excluded_paths    = []
      composite_indexes = []
    }
    idempotency = {
      partition_key     = "/pk"
      default_ttl       = -1
      included_paths    = ["/*"]
      excluded_paths    = []
      composite_indexes = []
    }
  }

  # THE list of Function App settings (docs/deploy.md, "Settings contract"). Every value is an
  # endpoint, a name, an identity id or a Key Vault reference: no account key, SAS or
  # connection string with a secret. tests/infra/test_app_settings.py enforces that.
  app_settings = {
    FUNCTIONS_WORKER_RUNTIME = "python"
    AzureWebJobsFeatureFlags = "EnableWorkerIndexing"
    # IO-bound Python: several worker processes, each with a thread pool, per instance.
    FUNCTIONS_WORKER_PROCESS_COUNT = "4"
    PYTHON_THREADPOOL_THREAD_COUNT = "16"

    # Host storage (leases, timers, blob receipts, Durable's Azure Storage backend) by identity.
    AzureWebJobsStorage__accountName = azurerm_storage_account.this.name
    AzureWebJobsStorage__credential  = "managedidentity"
    AzureWebJobsStorage__clientId    = azurerm_user_assigned_identity.this.client_id

    # Run from a package blob fetched with the identity: no Azure Files content share (which
    # would need an account key) and no SAS in the URL.
    WEBSITE_RUN_FROM_PACKAGE                     = local.package_url
    WEBSITE_RUN_FROM_PACKAGE_BLOB_MI_RESOURCE_ID = azurerm_user_assigned_identity.this.id

    # Trigger connections (identity-based). Names are the contract with triggers/.
    ServiceBusConnection__fullyQualifiedNamespace = "${azurerm_servicebus_namespace.this.name}.servicebus.windows.net"
    ServiceBusConnection__credential              = "managedidentity"
    ServiceBusConnection__clientId                = azurerm_user_assigned_identity.this.client_id
    BlobTriggerConnection__blobServiceUri         = azurerm_storage_account.this.primary_blob_endpoint
    BlobTriggerConnection__queueServiceUri        = azurerm_storage_account.this.primary_queue_endpoint
    BlobTriggerConnection__credential             = "managedidentity"
    BlobTriggerConnection__clientId               = azurerm_user_assigned_identity.this.client_id
    CosmosConnection__accountEndpoint             = azurerm_cosmosdb_account.this.endpoint
    CosmosConnection__credential                  = "managedidentity"
    CosmosConnection__clientId                    = azurerm_user_assigned_identity.this.client_id

    # Weft's own settings (shared/settings.py, prefix WEFT_).
    WEFT_TASK_HUB             = local.task_hub_name
    WEFT_STORE                = "cosmos"
    WEFT_BUS                  = "servicebus"
    WEFT_COSMOS_ENDPOINT      = azurerm_cosmosdb_account.this.endpoint
    WEFT_COSMOS_DATABASE      = local.cosmos_database
    WEFT_SERVICEBUS_NAMESPACE = "${azurerm_servicebus_namespace.this.name}.servicebus.windows.net"
    # Claim-check blobs: "blob" (not "auto") so a missing URL fails loudly instead of writing
    # payloads to the instance's local disk. shared/settings.py reads WEFT_BLOB_ACCOUNT_URL;
    # WEFT_PAYLOAD_ACCOUNT_URL is the same endpoint under the name the deployment brief announced.
    WEFT_PAYLOAD_STORE       = "blob"
    WEFT_BLOB_ACCOUNT_URL    = azurerm_storage_account.this.primary_blob_endpoint
    WEFT_PAYLOAD_ACCOUNT_URL = azurerm_storage_account.this.primary_blob_endpoint
    WEFT_PAYLOAD_CONTAINER   = "payloads"
    WEFT_ADMIN_KEY           = local.admin_key_ref

    # DefaultAzureCredential picks the user-assigned identity by this client id.
    AZURE_CLIENT_ID = azurerm_user_assigned_identity.this.client_id

    # Not a secret: the instrumentation key in it only names the resource, and local auth is
    # disabled on Application Insights, so ingestion needs an Entra token from the identity below.
    APPLICATIONINSIGHTS_CONNECTION_STRING     = azurerm_application_insights.this.connection_string
    APPLICATIONINSIGHTS_AUTHENTICATION_STRING = "ClientId=${azurerm_user_assigned_identity.this.client_id};Authorization=AAD"
  }

  # Added to app_settings only with durable_backend = durable_task_scheduler. The connection
  # string names an endpoint and the identity; it carries no key.
  durable_task_scheduler_app_settings = {
    DURABLE_TASK_SCHEDULER_CONNECTION_STRING                                              = "Endpoint=${try(azapi_resource.durable_scheduler[0].output.properties.endpoint, "")};Authentication=ManagedIdentity;ClientID=${azurerm_user_assigned_identity.this.client_id}"
    AzureFunctionsJobHost__extensions__durableTask__storageProvider__type                 = "azureManaged"
    AzureFunctionsJobHost__extensions__durableTask__storageProvider__connectionStringName = "DURABLE_TASK_SCHEDULER_CONNECTION_STRING"
  }

  # Data-plane roles of the app's identity, by the resource they are scoped to.
  identity_roles = {
    storage_blob_owner     = { scope = azurerm_storage_account.this.id, role = "Storage Blob Data Owner" }
    storage_queue          = { scope = azurerm_storage_account.this.id, role = "Storage Queue Data Contributor" }
    storage_table          = { scope = azurerm_storage_account.this.id, role = "Storage Table Data Contributor" }
    servicebus_sender      = { scope = azurerm_servicebus_namespace.this.id, role = "Azure Service Bus Data Sender" }
    servicebus_receiver    = { scope = azurerm_servicebus_namespace.this.id, role = "Azure Service Bus Data Receiver" }
    key_vault_secrets_user = { scope = azurerm_key_vault.this.id, role = "Key Vault Secrets User" }
    appinsights_publisher  = { scope = azurerm_application_insights.this.id, role = "Monitoring Metrics Publisher" }
  }

  # Read-only data roles for operators (var.operator_object_ids), for the Portal walkthrough in
  # docs/deploy.md: Storage browser (task hub tables, blobs), Service Bus Explorer (peek),
  # workbooks and alerts.
  operator_roles = {
    blob_reader      = { scope = azurerm_storage_account.this.id, role = "Storage Blob Data Reader" }
    table_reader     = { scope = azurerm_storage_account.this.id, role = "Storage Table Data Reader" }
    queue_reader     = { scope = azurerm_storage_account.this.id, role = "Storage Queue Data Reader" }
    servicebus_peek  = { scope = azurerm_servicebus_namespace.this.id, role = "Azure Service Bus Data Receiver" }
    monitoring       = { scope = azurerm_resource_group.this.id, role = "Monitoring Reader" }
    workbook_contrib = { scope = azurerm_resource_group.this.id, role = "Workbook Contributor" }
  }
  operator_assignments = {
    for pair in setproduct(var.operator_object_ids, keys(local.operator_roles)) :
    "${pair[0]}-${pair[1]}" => { principal_id = pair[0], scope = local.operator_roles[pair[1]].scope, role = local.operator_roles[pair[1]].role }
  }

  # Roles of whoever runs `terraform apply`: write the admin key secret, upload the app package.
  deployer_roles = {
    key_vault_secrets_officer = { scope = azurerm_key_vault.this.id, role = "Key Vault Secrets Officer" }
    package_upload            = { scope = azurerm_storage_container.this["deployments"].id, role = "Storage Blob Data Contributor" }
  }
}
