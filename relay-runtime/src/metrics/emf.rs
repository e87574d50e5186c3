//! The CloudWatch Embedded Metric Format (EMF) documents the relays write, within the format's
//! limits, through the process's one output.
//!
//! A recorder of the `metrics` facade of our own, because the crate the relays used,
//! `metrics_cloudwatch_embedded` (0.10.0, the newest on crates.io), keeps a histogram's values in
//! a channel of 100 between flushes and drops every later value with an ERROR log line each: the
//! poller records `Backlog` and `OldestPendingAgeSeconds` once per pass and flushes every minute,
//! so a busy minute (hundreds of passes during an outage) kept its first 100 passes, lost the
//! rest (the latest backlog, the one scaling and alarms need) and logged hundreds of ERROR lines.
//! It also wrote each document in many small writes to an unlocked stderr, where a log line could
//! land inside it. Its gauges are written at every flush, set or not, so a poller whose reads fail
//! would repeat its last backlog instead of reporting nothing. It has no setting for any of
//! this, and no other maintained EMF recorder for the `metrics` facade was found; this is one file.
//!
//! What one flush writes, per label set (one dimension set: [`super::RELAY_DIMENSION`] and the
//! labels, e.g. [`super::OPERATION_DIMENSION`]):
//! - a counter: the sum since the last flush (nothing when 0);
//! - a gauge: the last value set since the last flush (nothing when none was);
//! - a histogram: every value recorded since the last flush, [`MAX_VALUES_PER_METRIC`] to a
//!   document at most: the rest go in further documents of the same timestamp, so CloudWatch's
//!   statistics (SampleCount, Sum, Minimum, Maximum, percentiles) cover every value.
//!
//! Every document is one line, written whole ([`crate::telemetry::Lines`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
use serde_json::{Map, Value, json};

use crate::telemetry::Lines;

/// EMF: a metric's value array holds at most 100 values; CloudWatch rejects the document otherwise.
pub const MAX_VALUES_PER_METRIC: usize = 100;
/// EMF: a metric directive names at most 100 metrics; CloudWatch rejects the document otherwise.
pub const MAX_METRICS_PER_DIRECTIVE: usize = 100;
/// EMF: a dimension set holds at most 30 dimensions; CloudWatch rejects the document otherwise.
pub const MAX_DIMENSIONS_PER_SET: usize = 30;
/// EMF: a document is one CloudWatch Logs event: 256 KiB, the smaller of the limits the
/// specification has stated (1 MB in its current text).
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// The relay's metrics: what was recorded since the last flush, and where documents go.
#[derive(Debug, Clone)]
pub struct Emf {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    namespace: String,
    /// Dimensions of every metric (the relay's name).
    dimensions: Vec<(String, String)>,
    output: Lines,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Per label set (in the order the key names them), per metric name.
    series: BTreeMap<Vec<(String, String)>, BTreeMap<String, Series>>,
    units: HashMap<String, Unit>,
    /// Root members written with every document (the Lambda's request id).
    properties: BTreeMap<String, Value>,
}

#[derive(Debug, Clone)]
enum Series {
    Counter(Arc<AtomicU64>),
    Gauge(Arc<LastValue>),
    Histogram(Arc<Samples>),
}

/// A gauge: its value, and whether it was set since the last flush.
#[derive(Debug, Default)]
struct LastValue(Mutex<(f64, bool)>);

impl metrics::GaugeFn for LastValue {
    fn increment(&self, value: f64) {
        let mut last = lock(&self.0);
        *last = (last.0 + value, true);
    }

    fn decrement(&self, value: f64) {
        let mut last = lock(&self.0);
        *last = (last.0 - value, true);
    }

    fn set(&self, value: f64) {
        *lock(&self.0) = (value, true);
    }
}

/// A histogram's values since the last flush.
#[derive(Debug, Default)]
struct Samples(Mutex<Vec<f64>>);

impl metrics::HistogramFn for Samples {
    fn record(&self, value: f64) {
        // EMF values are JSON numbers: NaN and infinities have none.
        if value.is_finite() {
            lock(&self.0).push(value);
        }
    }
}

/// A metric whose values are the facade's bookkeeping only: a poisoned lock still holds them.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Emf {
    /// Metrics in `namespace` with the dimension `relay_dimension` = `relay`, written to `output`.
    pub fn new(namespace: &str, relay_dimension: &str, relay: &str, output: Lines) -> Self {
        Self {
            inner: Arc::new(Inner {
                namespace: namespace.to_owned(),
                dimensions: vec![(relay_dimension.to_owned(), relay.to_owned())],
                output,
                state: Mutex::default(),
            }),
        }
    }

    /// The recorder to install (globally, or locally in a test) that records into this.
    pub fn recorder(&self) -> EmfRecorder {
        EmfRecorder(self.clone())
    }

    /// Sets a root member written with every later document (e.g. the Lambda's `requestId`).
    pub fn set_property(&self, name: &str, value: impl Into<Value>) -> &Self {
        lock(&self.inner.state)
            .properties
            .insert(name.to_owned(), value.into());
        self
    }

    /// Writes what was recorded since the last flush, one whole line per document.
    ///
    /// # Errors
    /// When the output cannot be written (what was taken for it is lost).
    pub fn flush(&self) -> std::io::Result<()> {
        let now = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or_default();
        for document in self.documents(now) {
            self.inner.output.write_line(document.as_bytes())?;
        }
        Ok(())
    }

    /// Flushes every `interval` on a task of its own until the process ends (a long-running
    /// relay); the first flush is one interval from now.
    pub fn flush_every(&self, interval: Duration) {
        let emf = self.clone();
        tokio::spawn(async move {
            let mut ticks =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                ticks.tick().await;
                if let Err(err) = emf.flush() {
                    tracing::warn!(error = %err, "could not write metrics");
                }
            }
        });
    }

    /// The documents for what was recorded since the last flush, stamped `timestamp_ms`; taking
    /// them starts the next period.
    pub fn documents(&self, timestamp_ms: u64) -> Vec<String> {
        let state = lock(&self.inner.state);
        let mut documents = Vec::new();
        for (labels, series) in &state.series {
            // Per metric: its unit and its values, one entry per document it needs.
            let mut pieces: Vec<(&str, Option<&'static str>, Vec<Value>)> = Vec::new();
            for (name, series) in series {
                let chunks: Vec<Value> = match series {
                    Series::Counter(sum) => match sum.swap(0, Ordering::Relaxed) {
                        0 => continue,
                        n => vec![json!(n)],
                    },
                    Series::Gauge(last) => {
                        let mut last = lock(&last.0);
                        if !last.1 {
                            continue;
                        }
                        last.1 = false;
                        vec![json!(last.0)]
                    }
                    Series::Histogram(samples) => {
                        let values = std::mem::take(&mut *lock(&samples.0));
                        values
                            .chunks(MAX_VALUES_PER_METRIC)
                            .map(|chunk| json!(chunk))
                            .collect()
                    }
                };
                if !chunks.is_empty() {
                    let unit = state.units.get(name).map(unit_name);
                    pieces.push((name, unit, chunks));
                }
            }
            let rounds = pieces.iter().map(|p| p.2.len()).max().unwrap_or(0);
            for round in 0..rounds {
                let in_round: Vec<_> = pieces
                    .iter()
                    .filter_map(|(name, unit, chunks)| {
                        chunks.get(round).map(|values| (*name, *unit, values))
                    })
                    .collect();
                for metrics in in_round.chunks(MAX_METRICS_PER_DIRECTIVE) {
                    documents.push(self.document(&state, labels, metrics, timestamp_ms));
                }
            }
        }
        documents
    }

    fn document(
        &self,
        state: &State,
        labels: &[(String, String)],
        metrics: &[(&str, Option<&'static str>, &Value)],
        timestamp_ms: u64,
    ) -> String {
        let mut root = Map::new();
        for (name, value) in &state.properties {
            root.insert(name.clone(), value.clone());
        }
        let dimensions: Vec<&str> = self
            .inner
            .dimensions
            .iter()
            .chain(labels)
            .map(|(key, value)| {
                root.insert(key.clone(), Value::String(value.clone()));
                key.as_str()
            })
            .collect();
        let definitions: Vec<Value> = metrics
            .iter()
            .map(|(name, unit, values)| {
                root.insert((*name).to_owned(), (*values).clone());
                match unit {
                    Some(unit) => json!({ "Name": name, "Unit": unit }),
                    None => json!({ "Name": name }),
                }
            })
            .collect();
        root.insert(
            "_aws".to_owned(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": self.inner.namespace,
                    "Dimensions": [dimensions],
                    "Metrics": definitions,
                }],
            }),
        );
        Value::Object(root).to_string()
    }

    /// The series `key` names, created as `make` when new; `None` when the key has too many
    /// labels for one dimension set or names a metric of another kind.
    fn series(&self, key: &Key, make: fn() -> Series) -> Option<Series> {
        let labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        if self.inner.dimensions.len() + labels.len() > MAX_DIMENSIONS_PER_SET {
            return None;
        }
        let mut state = lock(&self.inner.state);
        let series = state
            .series
            .entry(labels)
            .or_default()
            .entry(key.name().to_owned())
            .or_insert_with(make);
        let wanted = make();
        (std::mem::discriminant(series) == std::mem::discriminant(&wanted)).then(|| series.clone())
    }

    fn describe(&self, key: &KeyName, unit: Option<Unit>) {
        let mut state = lock(&self.inner.state);
        match unit {
            Some(unit) => state.units.insert(key.as_str().to_owned(), unit),
            None => state.units.remove(key.as_str()),
        };
    }
}

/// The `metrics` recorder of an [`Emf`].
#[derive(Debug, Clone)]
pub struct EmfRecorder(Emf);

impl metrics::Recorder for EmfRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        self.0.describe(&key, unit);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        self.0.describe(&key, unit);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        self.0.describe(&key, unit);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        match self.0.series(key, || Series::Counter(Arc::default())) {
            Some(Series::Counter(sum)) => Counter::from_arc(sum),
            _ => Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        match self.0.series(key, || Series::Gauge(Arc::default())) {
            Some(Series::Gauge(last)) => Gauge::from_arc(last),
            _ => Gauge::noop(),
        }
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        match self.0.series(key, || Series::Histogram(Arc::default())) {
            Some(Series::Histogram(samples)) => Histogram::from_arc(samples),
            _ => Histogram::noop(),
        }
    }
}

/// CloudWatch's name for a unit of the `metrics` facade.
fn unit_name(unit: &Unit) -> &'static str {
    match unit {
        Unit::Count => "Count",
        Unit::Percent => "Percent",
        Unit::Seconds => "Seconds",
        Unit::Milliseconds => "Milliseconds",
        Unit::Microseconds => "Microseconds",
        // CloudWatch has no nanoseconds; the name keeps the value's meaning off no unit at all.
        Unit::Nanoseconds => "None",
        Unit::Tebibytes => "Terabytes",
        Unit::Gibibytes => "Gigabytes",
        Unit::Mebibytes => "Megabytes",
        Unit::Kibibytes => "Kilobytes",
        Unit::Bytes => "Bytes",
        Unit::TerabitsPerSecond => "Terabits/Second",
        Unit::GigabitsPerSecond => "Gigabits/Second",
        Unit::MegabitsPerSecond => "Megabits/Second",
        Unit::KilobitsPerSecond => "Kilobits/Second",
        Unit::BitsPerSecond => "Bits/Second",
        Unit::CountPerSecond => "Count/Second",
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use serde_json::Value;

    use super::*;
    use crate::metrics::{BACKLOG, FAILED_CALLS, OPERATION_DIMENSION, PUBLISHED, spec};

    /// An in-memory output several threads write to.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn lines(&self) -> Vec<String> {
            String::from_utf8(lock(&self.0).clone())
                .expect("utf-8")
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    fn emf(output: &Shared) -> Emf {
        Emf::new(
            "OutboxRelay",
            "Relay",
            "relay-poller",
            Lines::new(output.clone()),
        )
    }

    fn parsed(documents: &[String]) -> Vec<Value> {
        documents
            .iter()
            .map(|d| {
                let violations = spec::violations(d);
                assert!(violations.is_empty(), "{violations:?} in {d}");
                serde_json::from_str(d).expect("JSON")
            })
            .collect()
    }

    #[test]
    fn values_beyond_a_documents_100_go_in_further_documents_and_counters_are_summed() {
        // Given 250 passes' backlogs, 7 events published in 3 calls and 2 failed Query calls
        // recorded since the last flush
        let emf = emf(&Shared::default());
        metrics::with_local_recorder(&emf.recorder(), || {
            metrics::describe_histogram!(BACKLOG, Unit::Count, "backlog");
            for pass in 0..250 {
                metrics::histogram!(BACKLOG).record(f64::from(pass));
            }
            for n in [3, 4, 0] {
                metrics::counter!(PUBLISHED).increment(n);
            }
            metrics::counter!(FAILED_CALLS, OPERATION_DIMENSION => "Query").increment(2);
        });

        // When they are flushed
        let documents = parsed(&emf.documents(1_795_000_000_000));

        // Then every document is valid EMF, the backlog's 250 values are all there in order, 100
        // at most to a document, Published is 7 once, and FailedCalls has its own dimension set
        let backlog: Vec<f64> = documents
            .iter()
            .flat_map(|d| spec::values_of(d, BACKLOG))
            .collect();
        assert_eq!(backlog, (0..250).map(f64::from).collect::<Vec<_>>());
        let published: Vec<f64> = documents
            .iter()
            .flat_map(|d| spec::values_of(d, PUBLISHED))
            .collect();
        assert_eq!(published, [7.0]);
        let failed: Vec<&Value> = documents
            .iter()
            .filter(|d| !spec::values_of(d, FAILED_CALLS).is_empty())
            .collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0]["Operation"], "Query");
        assert_eq!(
            failed[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            serde_json::json!([["Relay", "Operation"]])
        );
        assert_eq!(
            documents[0]["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"],
            "Count"
        );

        // And the next flush has nothing to write
        assert!(emf.documents(1_795_000_060_000).is_empty());
    }

    #[test]
    fn a_gauge_is_its_last_value_and_nothing_when_not_set_since_the_last_flush() {
        let emf = emf(&Shared::default());
        let recorder = emf.recorder();
        metrics::with_local_recorder(&recorder, || {
            for v in [3.0, 9.0, 4.0] {
                metrics::gauge!("Level").set(v);
            }
        });
        let first = parsed(&emf.documents(1));
        assert_eq!(spec::values_of(&first[0], "Level"), [4.0]);
        assert!(emf.documents(2).is_empty());
    }

    #[test]
    fn log_lines_and_metric_documents_written_at_once_never_interleave() {
        // Given one output shared by a JSON logger on four threads and the metrics
        let output = Shared::default();
        let emf = emf(&output);
        let lines = Lines::new(output.clone());
        let subscriber = tracing_subscriber::fmt().json().with_writer(lines).finish();
        let dispatch = tracing::Dispatch::new(subscriber);

        // When the four threads log 500 lines each while a fifth records and flushes 50 times
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let dispatch = dispatch.clone();
                scope.spawn(move || {
                    tracing::dispatcher::with_default(&dispatch, || {
                        for i in 0..500 {
                            tracing::info!(thread, i, padding = %"x".repeat(200), "a log line");
                        }
                    });
                });
            }
            scope.spawn(|| {
                let recorder = emf.recorder();
                for _ in 0..50 {
                    metrics::with_local_recorder(&recorder, || {
                        for v in 0..150 {
                            metrics::histogram!(BACKLOG).record(f64::from(v));
                        }
                    });
                    emf.flush().expect("flush");
                }
            });
        });

        // Then every line is either one log line or one valid document: 2,000 and 100
        let (mut logs, mut documents) = (0, 0);
        for line in output.lines() {
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not one JSON line ({e}): {line}"));
            if spec::is_emf(&value) {
                let violations = spec::violations(&line);
                assert!(violations.is_empty(), "{violations:?}");
                documents += 1;
            } else {
                assert_eq!(value["fields"]["message"], "a log line", "{line}");
                logs += 1;
            }
        }
        assert_eq!((logs, documents), (2000, 100));
    }
}
