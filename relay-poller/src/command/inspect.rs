//! `relay-poller inspect`: what happened to events, looked up by id or by table key
//! ([`crate::inspect`] reads them).

use std::process::ExitCode;

use chrono::Utc;
use relay_runtime::SettingError;
use relay_runtime::probe::{Kind, Probe, Resource};

use crate::config::InspectArgs;
use crate::inspect::{Inspection, Inspector};
use crate::probes::load_and_probe;
use crate::process::{EXIT_FAILURE, print, say};

/// Prints what happened to each event; exit [`EXIT_FAILURE`] when one is not found.
///
/// # Errors
/// A setting out of range, what a probe found unusable, or a read that failed.
pub async fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    SettingError::non_empty::<InspectArgs>("table_name", &args.table_name)?;
    let sdk = load_and_probe(&[Probe::Table {
        table: Resource::new(
            Kind::Table,
            &args.table_name,
            SettingError::name_of::<InspectArgs>("table_name"),
        ),
        index: None,
    }])
    .await?;
    let inspector = Inspector {
        dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
        table_name: args.table_name.clone(),
    };
    let now = Utc::now();
    let found = match &args.key {
        Some(key) => {
            let key = outbox_shared::ItemKey {
                pk: key[0].clone(),
                sk: key[1].clone(),
            };
            vec![inspector.by_key(&key, now).await?]
        }
        None => inspector.by_event_ids(&args.event_ids, now).await?,
    };
    let text = if args.json {
        serde_json::to_string(&found)? + "\n"
    } else {
        found
            .iter()
            .map(Inspection::to_text)
            .collect::<Vec<_>>()
            .join("\n")
    };
    print(&text, "inspection")?;
    let missing = found.iter().filter(|i| !i.found).count();
    say(&format!(
        "inspect: {} of {} found{}",
        found.len() - missing,
        found.len(),
        if missing > 0 {
            format!(" (exit {EXIT_FAILURE})")
        } else {
            String::new()
        }
    ));
    // Not finding an event is an answer, but a script should see it.
    if missing == 0 {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(EXIT_FAILURE))
    }
}
