//! The stack the demo runs on (table, bus, sink queue, dead-letter queue), provisioned from the
//! template on the local emulators or given on the command line, and the clients it reads it with.
//! On the Custom Event Bus (`--bus custom`) the stack's bus is the bus's ARN and its sink queue
//! the template's FIFO subscriber's queue.

use anyhow::{Result, bail};
use outbox_infra::LocalStack;
use outbox_shared::Misconfiguration;
use relay_runtime::BusKind;
use relay_runtime::preflight::{self, Kind, Need, Resource, Unusable};

use crate::cli::{Args, Bus};
use crate::progress::phase;

/// The EventBridge `Source` the demo's writer and relays use.
pub(crate) const SOURCE: &str = "demo.orders";

/// The stack the demo runs on, and the clients it reads it with.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    pub(crate) stack: LocalStack,
    pub(crate) dynamodb: aws_sdk_dynamodb::Client,
    pub(crate) sqs: aws_sdk_sqs::Client,
}

impl Env {
    pub(crate) async fn queue_depth(&self, queue_url: &str) -> Result<u64> {
        Ok(outbox_infra::queue_depth(&self.sqs, queue_url).await?)
    }
}

pub(crate) async fn provision(args: &Args) -> Result<Env> {
    // The demo creates and fills its own resources: never against an account by accident.
    let custom = (args.bus == Bus::Custom).then_some("AWS_ENDPOINT_URL_EVENTBRIDGEV2");
    for variable in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"]
        .into_iter()
        .chain(custom)
    {
        if std::env::var_os(variable).is_none() {
            bail!(
                "{variable} is not set: run the demo with `make demo`, which starts the local emulators"
            );
        }
    }
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    probe(&sdk, args).await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let stack = match (
        &args.table_name,
        &args.event_bus_name,
        &args.sink_queue_url,
        &args.dead_letter_queue_url,
    ) {
        (Some(table), Some(bus), Some(sink), Some(dlq)) => {
            LocalStack::existing(&dynamodb, table, bus, sink, dlq).await?
        }
        _ => {
            let suffix = uuid::Uuid::now_v7().simple().to_string();
            let suffix = &suffix[suffix.len() - 10..];
            match args.bus {
                Bus::Classic => {
                    phase(
                        "provisioning the table, bus, sink queue and dead-letter queue from infra/template.yaml",
                    );
                    let eventbridge = aws_sdk_eventbridge::Client::new(&sdk);
                    LocalStack::provision(&dynamodb, &eventbridge, &sqs, suffix).await?
                }
                Bus::Custom => {
                    phase(
                        "provisioning the table, Custom Event Bus, FIFO subscriber and queue, and dead-letter queue from infra/template.yaml",
                    );
                    let eventbridgev2 = aws_sdk_eventbridgev2::Client::new(&sdk);
                    provision_custom(&dynamodb, &eventbridgev2, &sqs, suffix).await?
                }
            }
        }
    };
    Ok(Env {
        stack,
        dynamodb,
        sqs,
    })
}

/// What the demo relies on, before it writes anything (`relay_runtime::preflight`, as the relays
/// probe at start-up): the credentials, and the stack given on the command line, or, when the
/// demo provisions its own, that DynamoDB, the bus's service and SQS answer at their endpoints.
///
/// # Errors
/// [`Unusable`]: one line naming what cannot be used, where, and what to do.
async fn probe(sdk: &aws_config::SdkConfig, args: &Args) -> Result<()> {
    let kind = match args.bus {
        Bus::Classic => BusKind::Classic,
        Bus::Custom => BusKind::Custom,
    };
    if let (Some(table), Some(bus), Some(sink), Some(dlq)) = (
        &args.table_name,
        &args.event_bus_name,
        &args.sink_queue_url,
        &args.dead_letter_queue_url,
    ) {
        return Ok(preflight::require(
            sdk,
            &[
                Need::Table {
                    table: Resource::new(Kind::Table, table, "--table-name"),
                    index: None,
                },
                Need::Target {
                    kind,
                    target: Resource::new(Kind::Bus, bus, "--event-bus-name"),
                },
                Need::Queue(Resource::new(
                    Kind::DeadLetterQueue,
                    dlq,
                    "--dead-letter-queue-url",
                )),
                Need::Queue(Resource::new(
                    Kind::DeadLetterQueue,
                    sink,
                    "--sink-queue-url",
                )),
            ],
        )
        .await?);
    }
    preflight::credentials(sdk).await?;
    // Nothing is there yet: a missing resource is the answer of a service that is reachable.
    let provisioned = "the demo's own stack (--table-name and the others to use an existing one)";
    let reachable = |result: Result<(), Unusable>| -> Result<()> {
        match result {
            Err(unusable) if unusable.problem != Misconfiguration::Missing => Err(unusable.into()),
            _ => Ok(()),
        }
    };
    reachable(
        preflight::table(
            sdk,
            &Resource::new(Kind::Table, "outbox-demo-probe", provisioned),
        )
        .await
        .map(|_| ()),
    )?;
    let bus = match kind {
        BusKind::Classic => "outbox-demo-probe".to_owned(),
        BusKind::Custom => {
            "arn:aws:events:us-east-1:123456789012:event-busv2/outbox-demo-probe/0000000000000000000000000"
                .to_owned()
        }
    };
    reachable(
        preflight::target(sdk, kind, &Resource::new(Kind::Bus, bus, provisioned))
            .await
            .map(|_| ()),
    )?;
    let queue = std::env::var("AWS_ENDPOINT_URL")
        .map(|url| {
            format!(
                "{}/123456789012/outbox-demo-probe",
                url.trim_end_matches('/')
            )
        })
        .unwrap_or_default();
    reachable(
        preflight::queue(
            sdk,
            &Resource::new(Kind::DeadLetterQueue, queue, provisioned),
        )
        .await
        .map(|_| ()),
    )
}

/// The template's table and dead-letter queue, and its Custom Event Bus with the example FIFO
/// subscriber, whose queue is the sink: names end in `suffix`.
async fn provision_custom(
    dynamodb: &aws_sdk_dynamodb::Client,
    eventbridgev2: &aws_sdk_eventbridgev2::Client,
    sqs: &aws_sdk_sqs::Client,
    suffix: &str,
) -> Result<LocalStack> {
    let table = outbox_infra::create_outbox_table(dynamodb, &format!("outbox-{suffix}")).await?;
    let bus_arn =
        outbox_infra::create_custom_event_bus(eventbridgev2, &format!("bus-{suffix}")).await?;
    let subscriber = outbox_infra::create_fifo_subscriber(
        eventbridgev2,
        sqs,
        &bus_arn,
        &format!("sink-{suffix}"),
    )
    .await?;
    let dead_letters =
        outbox_infra::create_dead_letter_queue(sqs, &format!("dlq-{suffix}")).await?;
    Ok(LocalStack {
        table_name: table.table_name,
        stream_arn: table.stream_arn,
        bus_name: bus_arn,
        sink_queue_url: subscriber.queue_url,
        dead_letter_queue_url: dead_letters.queue_url,
    })
}
