//! Every error code the relays and the writer classify by is one the Rust SDK can produce (issue
//! 41, item 5): read from the SDK's own sources in the cargo registry (each crate's directory
//! found with `cargo metadata`): a code as its deserializers match it (`"CODE" =>`), as a value of
//! a modelled enum (a `BatchExecuteStatement` statement's code), as its retry classifiers list it,
//! or as its API documentation names it (`<code>409 ConditionalRequestConflict</code>`, S3's
//! `<i>Code:</i> ExpiredToken`). A code the SDK does not model is recorded from the emulator's
//! reply in the test itself: SQS's `InvalidParameterValue` for a message over its queue's
//! `MaximumMessageSize` (moto), DynamoDB's `UnrecognizedClientException` for an access key it does
//! not take (DynamoDB Local).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use outbox_shared::error::{
    ACCESS_DENIED_CODES, CREDENTIALS_REFUSED_CODES, NOT_FOUND_CODES, THROTTLING_CODES,
    TRANSIENT_CODES,
};
use outbox_tests::TestEnv;
use relay_runtime::TargetKind;
use relay_runtime::target::COMMON_POISON_CODES;

/// The triple of the machine the tests run on (`rustc -vV`'s `host`).
fn host() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let output = std::process::Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc names its host")
        .to_owned()
}

/// The source directory of every package of the workspace's dependency graph on this machine,
/// by name (every version of it), from `cargo metadata` (offline: the lock file's versions, in
/// the registry since the build; other platforms' packages are left out, never downloaded).
fn package_dirs() -> BTreeMap<String, Vec<PathBuf>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--filter-platform",
        ])
        .arg(host())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let mut dirs: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for package in metadata["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("a name").to_owned();
        let manifest = Path::new(package["manifest_path"].as_str().expect("a manifest"));
        dirs.entry(name)
            .or_default()
            .push(manifest.parent().expect("a directory").to_owned());
    }
    dirs
}

/// The Rust sources under `dir`, concatenated.
fn sources_under(dir: &Path, into: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources_under(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
}

/// The sources of the packages `names` (every version), concatenated.
fn sources(dirs: &BTreeMap<String, Vec<PathBuf>>, names: &[&str]) -> String {
    let mut text = String::new();
    for name in names {
        let found = dirs
            .get(*name)
            .unwrap_or_else(|| panic!("{name} is not in the dependency graph"));
        for dir in found {
            sources_under(&dir.join("src"), &mut text);
        }
    }
    text
}

/// The codes the SDK's `sources` name: each string literal of a code's characters (`"CODE"`), and
/// each error code of its API documentation (` CODE</code>`, `<code>CODE</code>`,
/// `<i>Code:</i> CODE<`). One pass over the sources, where looking for each code's four spellings
/// read them some two hundred times.
fn named_codes(sources: &str) -> HashSet<&str> {
    fn code_char(b: u8) -> bool {
        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':')
    }
    let bytes = sources.as_bytes();
    // The code starting at `start`, if `closing` follows it.
    let code_at = |start: usize, closing: &[u8]| -> Option<&str> {
        let end = start + bytes[start..].iter().take_while(|b| code_char(**b)).count();
        (end > start && bytes[end..].starts_with(closing)).then(|| &sources[start..end])
    };
    let mut named = HashSet::new();
    for (quote, _) in sources.match_indices('"') {
        named.extend(code_at(quote + 1, b"\""));
    }
    for (close, _) in sources.match_indices("</code>") {
        let start = close
            - bytes[..close]
                .iter()
                .rev()
                .take_while(|b| code_char(**b))
                .count();
        if start < close && (bytes[..start].ends_with(b" ") || bytes[..start].ends_with(b"<code>"))
        {
            named.insert(&sources[start..close]);
        }
    }
    const DOC_CODE: &str = "<i>Code:</i> ";
    for (at, _) in sources.match_indices(DOC_CODE) {
        named.extend(code_at(at + DOC_CODE.len(), b"<"));
    }
    named
}

/// The SDK crate a target kind's call is made with.
fn sdk_of(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Classic => "aws-sdk-eventbridge",
        TargetKind::Custom => "aws-sdk-eventbridgev2",
        TargetKind::Sns => "aws-sdk-sns",
        TargetKind::Sqs => "aws-sdk-sqs",
        TargetKind::Kinesis => "aws-sdk-kinesis",
    }
}

/// The code the SDK reports for a `SendMessageBatch` whose message is over its queue's
/// `MaximumMessageSize`, as the emulator answers it.
async fn recorded_message_too_long(env: &TestEnv) -> String {
    let queue = env.create_queue(&outbox_tests::unique_name("small")).await;
    env.sqs
        .set_queue_attributes()
        .queue_url(&queue)
        .attributes(QueueAttributeName::MaximumMessageSize, "1024")
        .send()
        .await
        .expect("set MaximumMessageSize");
    let entry = SendMessageBatchRequestEntry::builder()
        .id("0")
        .message_body("m".repeat(2048))
        .build()
        .expect("an entry");
    let refused = env
        .sqs
        .send_message_batch()
        .queue_url(&queue)
        .entries(entry)
        .send()
        .await;
    match refused {
        Err(err) => outbox_shared::error::error_code(&err)
            .expect("a code")
            .to_owned(),
        Ok(answer) => answer
            .failed()
            .first()
            .map(|failed| failed.code().to_owned())
            .expect("the message refused"),
    }
}

/// The code the SDK reports for a DynamoDB call signed with an access key DynamoDB does not
/// take, as DynamoDB Local answers it (its keys are letters and digits only).
async fn recorded_key_refused(env: &TestEnv) -> String {
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&env.sdk_config)
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "not-a-key!",
                "secret",
                None,
                None,
                "test",
            ))
            .build(),
    );
    let refused = client
        .describe_table()
        .table_name(&env.table_name)
        .send()
        .await
        .expect_err("DynamoDB Local refuses the key");
    outbox_shared::error::error_code(&refused)
        .expect("a code")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_code_the_classification_names_is_one_the_sdk_can_produce() {
    // Given the SDK's sources, and a reply of the emulator for what the SDK does not model
    let dirs = package_dirs();
    let env = TestEnv::new().await;
    let recorded = recorded_message_too_long(&env).await;
    assert_eq!(recorded, "InvalidParameterValue");
    let refused_key = recorded_key_refused(&env).await;
    assert_eq!(refused_key, "UnrecognizedClientException");

    // The codes each SDK crate the workspace uses names, its sources read once
    let every_sdk: Vec<&str> = dirs
        .keys()
        .map(String::as_str)
        .filter(|name| {
            name.starts_with("aws-sdk-")
                || name.starts_with("aws-smithy-")
                || *name == "aws-runtime"
        })
        .collect();
    let sources_by_crate: BTreeMap<&str, String> = every_sdk
        .iter()
        .map(|name| (*name, sources(&dirs, &[name])))
        .collect();
    let named_by_crate: BTreeMap<&str, HashSet<&str>> = sources_by_crate
        .iter()
        .map(|(name, text)| (*name, named_codes(text)))
        .collect();

    // Then each target kind's codes are its SDK's (or recorded from its service's emulator)
    let mut unknown = Vec::new();
    for &kind in TargetKind::all() {
        let named = named_by_crate
            .get(sdk_of(kind))
            .unwrap_or_else(|| panic!("{} is not in the dependency graph", sdk_of(kind)));
        for code in kind.spec().named_codes() {
            let recorded_here = kind == TargetKind::Sqs && code == recorded;
            if !named.contains(code) && !recorded_here {
                unknown.push(format!("{kind}: {code} (not in {})", sdk_of(kind)));
            }
        }
    }
    // And the codes every service shares are named by one of the SDK crates the workspace uses
    let named: HashSet<&str> = named_by_crate.values().flatten().copied().collect();
    for (list, codes) in [
        ("THROTTLING_CODES", THROTTLING_CODES),
        ("TRANSIENT_CODES", TRANSIENT_CODES),
        ("NOT_FOUND_CODES", NOT_FOUND_CODES),
        ("ACCESS_DENIED_CODES", ACCESS_DENIED_CODES),
        ("CREDENTIALS_REFUSED_CODES", CREDENTIALS_REFUSED_CODES),
        ("COMMON_POISON_CODES", COMMON_POISON_CODES),
    ] {
        for code in codes {
            if !named.contains(code) && *code != refused_key {
                unknown.push(format!("{list}: {code}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "codes no SDK crate of the workspace produces: {unknown:#?}"
    );
}
