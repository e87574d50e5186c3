//! Wall time of one 100-event batch through the stream handler against the latency model
//! (every AWS call answers after 10 ms, unlimited parallelism): the floor is two round trips,
//! publish then mark published, each fully concurrent. Measured on the classic bus (10 entries a
//! call) and on a Custom Event Bus (100 entries a call), their batches interleaved.
//!
//! Run: `cargo bench -p outbox-tests --bench relay_stream_latency` (no emulator needed). Prints the
//! median, p90 and minimum over 30 batches after 3 warm-up batches, and beside them the median of
//! one lone call on the same model: the batch's floor is twice that.
//!
//! The process runs on the relays' allocator (`relay_runtime::Allocator`), as the Lambda does.
//!
//! The model waits on its exact clock (`LATENCY_MODEL_CLOCK=tokio` runs it on tokio's timer,
//! which adds about 1.2 ms to each call; see `latency_model::Clock`).

use relay_runtime::Deadline;
use std::time::{Duration, Instant};

use chrono::Utc;
use outbox_tests::fixtures;
use outbox_tests::latency_model::{Clock, LatencyModel};
use relay_runtime::{PublisherArgs, TargetKind};
use relay_stream::aws_lambda_events::dynamodb::EventRecord;

/// The allocator the relay binaries declare, so this process measures what ships.
#[global_allocator]
static ALLOCATOR: relay_runtime::Allocator = relay_runtime::Allocator;

const EVENTS: usize = 100;
const WARM_UP: usize = 3;
const RUNS: usize = 30;
const LATENCY: Duration = Duration::from_millis(10);

/// Lone `PutEvents` calls timed to find what one call costs on the model.
const LONE_CALLS: usize = 30;

/// The median wall time of one lone `PutEvents` call of one entry: the model's delay, as this
/// runtime sees it, and the client's own work for one call.
async fn one_call_median(client: &aws_sdk_eventbridge::Client) -> Duration {
    let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .event_bus_name("bench-bus")
        .source("bench.orders")
        .detail_type("OrderCreated")
        .detail("{}")
        .build();
    let mut times = Vec::with_capacity(LONE_CALLS);
    for _ in 0..LONE_CALLS {
        let started = Instant::now();
        client
            .put_events()
            .entries(entry.clone())
            .send()
            .await
            .expect("the model accepts it");
        times.push(started.elapsed());
    }
    times.sort();
    times[LONE_CALLS / 2]
}

fn main() {
    // The runtime the Lambda runs on (relay-stream/src/main.rs): one thread.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let clock = Clock::for_benchmarks();
        // One model per bus kind (each counts its own calls); their batches interleaved, so both
        // kinds see the same machine.
        let kinds = [TargetKind::Classic, TargetKind::Custom];
        let models: Vec<LatencyModel> = kinds
            .iter()
            .map(|_| LatencyModel::new(LATENCY).with_clock(clock))
            .collect();
        let one_call = one_call_median(&aws_sdk_eventbridge::Client::new(&models[0].sdk_config())).await;
        let relays: Vec<_> = kinds
            .iter()
            .zip(&models)
            .map(|(&kind, model)| {
                let sdk = model.sdk_config();
                let args = fixtures::stream_relay_args(
                    "bench-table",
                    PublisherArgs {
                        source: "bench.orders".into(),
                        ..fixtures::publisher_args_of(kind, bench_bus(kind))
                    },
                );
                relay_stream::build_relay(&args, &sdk)
                .expect("valid configuration")
            })
            .collect();
        let mut times = vec![Vec::with_capacity(RUNS); kinds.len()];
        for run in 0..WARM_UP + RUNS {
            for (k, (relay, model)) in relays.iter().zip(&models).enumerate() {
                let items = fixtures::pending_items("bench-table", EVENTS, Utc::now());
                model.seed_pending(&items);
                let records: Vec<EventRecord> = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| fixtures::insert_record(item, i))
                    .collect();
                let started = Instant::now();
                let report = relay.handle(&records, Deadline::NONE).await;
                let elapsed = started.elapsed();
                assert_eq!(report.counts().published, EVENTS as u64);
                assert_eq!(model.pending(), 0, "every event marked published");
                if run >= WARM_UP {
                    times[k].push(elapsed);
                }
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mut out = std::io::stdout().lock();
        use std::io::Write;
        for ((kind, model), mut times) in kinds.iter().zip(&models).zip(times) {
            times.sort();
            let mut calls = model.calls();
            // The lone calls are not the batches'.
            if *kind == TargetKind::Classic
                && let Some(put_events) = calls.get_mut("PutEvents")
            {
                *put_events -= LONE_CALLS as u64;
            }
            writeln!(
                out,
                "relay-stream 100-event batch, {kind} bus, {} ms per call ({} clock; one lone call: median {:.2} ms): median {:.1} ms, p90 {:.1} ms, min {:.1} ms over {RUNS} runs; calls {calls:?}",
                LATENCY.as_millis(),
                clock.name(),
                ms(one_call),
                ms(times[RUNS / 2]),
                ms(times[RUNS * 9 / 10]),
                ms(times[0]),
            )
            .expect("stdout");
        }
    });
}

/// The bench's bus of `kind` on the model.
fn bench_bus(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Classic => "bench-bus",
        TargetKind::Custom => {
            "arn:aws:events:us-east-1:123456789012:event-busv2/bench-bus/abcdefghij0123456789klmno"
        }
        other => unreachable!("the benchmark runs on the two buses, not {other}"),
    }
}
