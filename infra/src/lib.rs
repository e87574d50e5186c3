//! The deployable template (`infra/template.yaml`) and the local provisioning derived from it.
//!
//! Local provisioning creates, on the emulator, the table (keys, sparse sharded index, stream,
//! TTL), bus (with its archive) and dead-letter queue exactly as the template declares them: the
//! template is embedded at compile time and read through [`template::Template`], so there is no
//! second, hand-written schema to drift from it. A sink queue behind a rule
//! ([`create_sink_queue`]) is how the demo and the tests observe deliveries; on a Custom Event
//! Bus ([`create_custom_event_bus`]), the template's FIFO subscriber and its FIFO queue
//! ([`create_fifo_subscriber`]).

pub mod iam;
mod provision;
pub mod template;

pub use provision::{
    LocalStack, ProvisionError, ProvisionedBus, ProvisionedQueue, ProvisionedSubscriber,
    ProvisionedTable, create_custom_event_bus, create_dead_letter_queue,
    create_discarded_batch_bucket, create_event_bus, create_fifo_subscriber, create_outbox_table,
    create_payload_bucket, create_sink_queue, create_table_from, queue_depth, route_all_events,
};
pub use template::{TEMPLATE_YAML, Template, TemplateError};
