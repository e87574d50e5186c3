//! The stack the demo runs on (table, bus, sink queue, dead-letter queue), provisioned from the
//! template on the local emulators or given on the command line, and the clients it reads it with.
//! On the Custom Event Bus (`--target custom`) the stack's bus is the bus's ARN and its sink queue
//! the template's FIFO subscriber's queue; on SNS a FIFO topic with a FIFO queue subscribed (raw
//! messages), on SQS a FIFO queue that is its own sink, on Kinesis a stream read back (no sink
//! queue). The stack's `bus_name` is the relays' `EVENT_TARGET` whatever the kind. Beside it, the
//! payload bucket (the template's `PayloadBucket`) of the claim check: the writer's and the
//! relays' (`PAYLOAD_BUCKET`), where the large orders' payloads go.

use anyhow::{Result, bail};
use outbox_infra::LocalStack;
use outbox_shared::Misconfiguration;
use relay_runtime::TargetKind;
use relay_runtime::probe::{self, Kind, Probe, Resource, Unusable};

use crate::cli::Args;
use crate::progress::phase;

/// The EventBridge `Source` the demo's writer and relays use.
pub(crate) const SOURCE: &str = "demo.orders";

/// The stack the demo runs on, and the clients it reads it with.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    pub(crate) stack: LocalStack,
    pub(crate) dynamodb: aws_sdk_dynamodb::Client,
    pub(crate) sqs: aws_sdk_sqs::Client,
    pub(crate) kinesis: aws_sdk_kinesis::Client,
    /// The writer's claim check, and the large orders' payloads read back.
    pub(crate) s3: aws_sdk_s3::Client,
    /// The payload bucket: provisioned with the stack, or `--payload-bucket` with an existing
    /// one (`None` there without it, and then no large orders: `Args::parse_checked`).
    pub(crate) payload_bucket: Option<String>,
    /// The kind of target the relays publish to.
    pub(crate) target: TargetKind,
}

impl Env {
    pub(crate) async fn queue_depth(&self, queue_url: &str) -> Result<u64> {
        Ok(outbox_infra::queue_depth(&self.sqs, queue_url).await?)
    }
}

pub(crate) async fn provision(args: &Args) -> Result<Env> {
    // The demo creates and fills its own resources: never against an account by accident.
    let custom = (args.target == TargetKind::Custom).then_some("AWS_ENDPOINT_URL_EVENTBRIDGEV2");
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
    let s3 = aws_sdk_s3::Client::new(&sdk);
    let mut payload_bucket = args.payload_bucket.clone();
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
            let stack = match args.target {
                TargetKind::Classic => {
                    phase(
                        "provisioning the table, bus, sink queue and dead-letter queue from infra/template.yaml",
                    );
                    let eventbridge = aws_sdk_eventbridge::Client::new(&sdk);
                    LocalStack::provision(&dynamodb, &eventbridge, &sqs, suffix).await?
                }
                TargetKind::Custom => {
                    phase(
                        "provisioning the table, Custom Event Bus, FIFO subscriber and queue, and dead-letter queue from infra/template.yaml",
                    );
                    let eventbridgev2 = aws_sdk_eventbridgev2::Client::new(&sdk);
                    provision_custom(&dynamodb, &eventbridgev2, &sqs, suffix).await?
                }
                target => {
                    phase(&format!(
                        "provisioning the table and dead-letter queue from infra/template.yaml, and the {} target",
                        target
                    ));
                    let sns = aws_sdk_sns::Client::new(&sdk);
                    let kinesis = aws_sdk_kinesis::Client::new(&sdk);
                    provision_target(target, &dynamodb, &sqs, &sns, &kinesis, suffix).await?
                }
            };
            phase("provisioning the payload bucket from infra/template.yaml");
            payload_bucket = Some(
                outbox_infra::create_payload_bucket(&s3, &format!("payloads-{suffix}")).await?,
            );
            stack
        }
    };
    Ok(Env {
        stack,
        dynamodb,
        sqs,
        kinesis: aws_sdk_kinesis::Client::new(&sdk),
        s3,
        payload_bucket,
        target: args.target,
    })
}

/// What the demo relies on, before it writes anything (`relay_runtime::probe`, as the relays
/// probe at start-up): the credentials, and the stack given on the command line (with its payload
/// bucket, when given), or, when the demo provisions its own, that DynamoDB, the bus's service,
/// SQS and S3 answer at their endpoints.
///
/// # Errors
/// [`Unusable`]: one line naming what cannot be used, where, and what to do.
async fn probe(sdk: &aws_config::SdkConfig, args: &Args) -> Result<()> {
    let kind = args.target;
    if let (Some(table), Some(bus), Some(sink), Some(dlq)) = (
        &args.table_name,
        &args.event_bus_name,
        &args.sink_queue_url,
        &args.dead_letter_queue_url,
    ) {
        probe::each(
            sdk,
            &[
                Probe::Table {
                    table: Resource::new(Kind::Table, table, "--table-name"),
                    index: None,
                },
                Probe::Target {
                    kind,
                    target: Resource::new(kind.spec().resource, bus, "--event-bus-name"),
                },
                Probe::Queue(Resource::new(
                    Kind::DeadLetterQueue,
                    dlq,
                    "--dead-letter-queue-url",
                )),
                Probe::Queue(Resource::new(
                    Kind::DeadLetterQueue,
                    sink,
                    "--sink-queue-url",
                )),
            ]
            .into_iter()
            .chain(args.payload_bucket.as_ref().map(|bucket| {
                Probe::Bucket(Resource::new(Kind::Bucket, bucket, "--payload-bucket"))
            }))
            .collect::<Vec<_>>(),
        )
        .await?;
        return Ok(());
    }
    probe::credentials(sdk).await?;
    // Nothing is there yet: a missing resource is the answer of a service that is reachable.
    let provisioned = "the demo's own stack (--table-name and the others to use an existing one)";
    let reachable = |result: Result<(), Unusable>| -> Result<()> {
        match result {
            Err(unusable) if unusable.problem != Misconfiguration::Missing => Err(unusable.into()),
            _ => Ok(()),
        }
    };
    reachable(
        probe::table(
            sdk,
            &Resource::new(Kind::Table, "outbox-demo-probe", provisioned),
        )
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
    let target = match kind {
        TargetKind::Classic => "outbox-demo-probe".to_owned(),
        TargetKind::Custom => {
            "arn:aws:events:us-east-1:123456789012:event-busv2/outbox-demo-probe/0000000000000000000000000"
                .to_owned()
        }
        TargetKind::Sns => "arn:aws:sns:us-east-1:123456789012:outbox-demo-probe".to_owned(),
        TargetKind::Sqs => queue.clone(),
        TargetKind::Kinesis => {
            "arn:aws:kinesis:us-east-1:123456789012:stream/outbox-demo-probe".to_owned()
        }
    };
    reachable(
        probe::target(
            sdk,
            kind,
            &Resource::new(kind.spec().resource, target, provisioned),
        )
        .await
        .map(|_| ()),
    )?;
    reachable(
        probe::queue(
            sdk,
            &Resource::new(Kind::DeadLetterQueue, queue, provisioned),
        )
        .await
        .map(|_| ()),
    )?;
    reachable(
        probe::bucket(
            sdk,
            &Resource::new(Kind::Bucket, "outbox-demo-probe", provisioned),
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

/// The template's table and dead-letter queue, and a target of `target`'s kind with what a consumer
/// reads it through: a FIFO topic with a FIFO queue subscribed (raw messages, so the body is the
/// envelope), a FIFO queue, or a stream of two shards; names end in `suffix`.
async fn provision_target(
    target: TargetKind,
    dynamodb: &aws_sdk_dynamodb::Client,
    sqs: &aws_sdk_sqs::Client,
    sns: &aws_sdk_sns::Client,
    kinesis: &aws_sdk_kinesis::Client,
    suffix: &str,
) -> Result<LocalStack> {
    let table = outbox_infra::create_outbox_table(dynamodb, &format!("outbox-{suffix}")).await?;
    let dead_letters =
        outbox_infra::create_dead_letter_queue(sqs, &format!("dlq-{suffix}")).await?;
    let fifo_queue = |name: String| async move {
        let url = sqs
            .create_queue()
            .queue_name(format!("{name}.fifo"))
            .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
            .send()
            .await?
            .queue_url()
            .unwrap_or_default()
            .to_owned();
        anyhow::Ok(url)
    };
    let (target_name, sink) = match target {
        TargetKind::Sqs => {
            let queue = fifo_queue(format!("orders-{suffix}")).await?;
            (queue.clone(), queue)
        }
        TargetKind::Sns => {
            let topic = sns
                .create_topic()
                .name(format!("orders-{suffix}.fifo"))
                .attributes("FifoTopic", "true")
                .send()
                .await?
                .topic_arn()
                .unwrap_or_default()
                .to_owned();
            let queue = fifo_queue(format!("sink-{suffix}")).await?;
            let queue_arn = sqs
                .get_queue_attributes()
                .queue_url(&queue)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .send()
                .await?
                .attributes()
                .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
                .cloned()
                .unwrap_or_default();
            sns.subscribe()
                .topic_arn(&topic)
                .protocol("sqs")
                .endpoint(queue_arn)
                .attributes("RawMessageDelivery", "true")
                .send()
                .await?;
            (topic, queue)
        }
        TargetKind::Kinesis => {
            let name = format!("orders-{suffix}");
            kinesis
                .create_stream()
                .stream_name(&name)
                .shard_count(2)
                .send()
                .await?;
            let arn = kinesis
                .describe_stream_summary()
                .stream_name(&name)
                .send()
                .await?
                .stream_description_summary()
                .map(|s| s.stream_arn().to_owned())
                .unwrap_or_default();
            (arn, String::new())
        }
        TargetKind::Classic | TargetKind::Custom => bail!("{} is a bus", target),
    };
    Ok(LocalStack {
        table_name: table.table_name,
        stream_arn: table.stream_arn,
        bus_name: target_name,
        sink_queue_url: sink,
        dead_letter_queue_url: dead_letters.queue_url,
    })
}
