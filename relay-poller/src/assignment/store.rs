//! The lease-table port ([`LeaseStore`]) and its DynamoDB adapter: a consistent read of the whole
//! (small) table, heartbeats, and the conditional writes that take, renew, hand over and release
//! a lease. A conditional write that loses answers `None` / `false`; only other failures are
//! errors.

use outbox_shared::schema::PendingPartition;
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
    ScalarAttributeType, TableStatus, TimeToLiveSpecification,
};
use outbox_shared::SdkFailure;

use super::{
    Expect, Heartbeat, Lease, LeaseError, LeaseView, Millis, Term, attr, parse_partition_key,
    parse_poller_key, partition_key, poller_key,
};

/// How long `--create-lease-table` waits for a new table to become active.
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// Port: the lease table.
pub trait LeaseStore: Send + Sync {
    /// Every lease and heartbeat (a strongly consistent read).
    fn read(&self) -> impl Future<Output = Result<LeaseView, LeaseError>> + Send;

    /// Writes `heartbeat` (unconditionally: only its poller writes it).
    fn heartbeat(
        &self,
        heartbeat: &Heartbeat,
    ) -> impl Future<Output = Result<(), LeaseError>> + Send;

    /// Deletes `owner`'s heartbeat (a poller that stops), so the others' fair share grows at once.
    fn remove_heartbeat(&self, owner: &str) -> impl Future<Output = Result<(), LeaseError>> + Send;

    /// Takes `partition`'s lease for `owner` for `term`, if it is as `expect`ed (missing, or unchanged since read
    /// with that counter); clears a hand-over request. The lease as written, or `None` when
    /// another poller changed it first.
    fn take(
        &self,
        partition: &PendingPartition,
        expect: Expect,
        owner: &str,
        term: Term,
    ) -> impl Future<Output = Result<Option<Lease>, LeaseError>> + Send;

    /// Renews `owner`'s lease on `partition` if it still has `counter`, recording `last_pass_at`. The
    /// lease as written (with any hand-over request on it), or `None` when it is no longer
    /// `owner`'s as it knew it.
    fn renew(
        &self,
        partition: &PendingPartition,
        owner: &str,
        counter: u64,
        term: Term,
        last_pass_at: Option<Millis>,
    ) -> impl Future<Output = Result<Option<Lease>, LeaseError>> + Send;

    /// Asks `holder` to hand `partition`'s lease to `requester`, if `holder` still has it and nobody
    /// asked first. Does not change the counter (the holder's renewals go on).
    fn request_handoff(
        &self,
        partition: &PendingPartition,
        holder: &str,
        requester: &str,
    ) -> impl Future<Output = Result<bool, LeaseError>> + Send;

    /// Writes `owner`'s lease on `partition` (still at `counter`, and still asked for by `to`) over
    /// to `to` for `term`, and clears the request. `false` when either changed (the requester may
    /// have withdrawn as it stopped).
    fn hand_over(
        &self,
        partition: &PendingPartition,
        owner: &str,
        counter: u64,
        to: &str,
        term: Term,
        last_pass_at: Option<Millis>,
    ) -> impl Future<Output = Result<bool, LeaseError>> + Send;

    /// Withdraws `requester`'s hand-over request on `partition`, if it is still there (a poller
    /// that stops, so nobody hands it a lease it would never poll).
    fn withdraw_request(
        &self,
        partition: &PendingPartition,
        requester: &str,
    ) -> impl Future<Output = Result<bool, LeaseError>> + Send;

    /// Drops a hand-over request on `owner`'s lease (the requester is gone or caught up).
    fn clear_handoff(
        &self,
        partition: &PendingPartition,
        owner: &str,
    ) -> impl Future<Output = Result<bool, LeaseError>> + Send;

    /// Frees `owner`'s lease on `partition` (still at `counter`): no owner, expired now.
    fn release(
        &self,
        partition: &PendingPartition,
        owner: &str,
        counter: u64,
        now: Millis,
        last_pass_at: Option<Millis>,
    ) -> impl Future<Output = Result<bool, LeaseError>> + Send;
}

/// The calls of [`DynamoLeaseStore`] in a running poller: the lease table read, heartbeats written
/// and deleted, leases taken, renewed, handed over and released by conditional updates.
/// ([`create_lease_table`] is for local use: the template creates the table.)
pub const CALLS: &[relay_runtime::permissions::Call] = &[
    relay_runtime::permissions::Call::new(
        "dynamodb:Scan",
        relay_runtime::permissions::Target::LeaseTable,
    ),
    relay_runtime::permissions::Call::new(
        "dynamodb:PutItem",
        relay_runtime::permissions::Target::LeaseTable,
    ),
    relay_runtime::permissions::Call::new(
        "dynamodb:UpdateItem",
        relay_runtime::permissions::Target::LeaseTable,
    ),
    relay_runtime::permissions::Call::new(
        "dynamodb:DeleteItem",
        relay_runtime::permissions::Target::LeaseTable,
    ),
];

/// The calls of the leases' read-only view (`status`): the lease table read.
pub const VIEW_CALLS: &[relay_runtime::permissions::Call] =
    &[relay_runtime::permissions::Call::new(
        "dynamodb:Scan",
        relay_runtime::permissions::Target::LeaseTable,
    )];

/// The lease table on DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoLeaseStore {
    client: Client,
    table: String,
}

type Item = HashMap<String, AttributeValue>;

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

/// Whether `err` is a failed condition (the write lost a race: not an error).
fn is_condition_failed<E: ProvideErrorMetadata>(err: &SdkError<E>) -> bool {
    err.as_service_error()
        .and_then(ProvideErrorMetadata::code)
        .is_some_and(|code| code == "ConditionalCheckFailedException")
}

impl DynamoLeaseStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    fn failure<E>(&self, operation: &'static str, err: SdkError<E>) -> LeaseError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let missing = err
            .as_service_error()
            .and_then(ProvideErrorMetadata::code)
            .is_some_and(|code| code == "ResourceNotFoundException");
        let failure = SdkFailure::new(operation, err);
        if missing {
            LeaseError::TableMissing {
                table: self.table.clone(),
                failure,
            }
        } else {
            LeaseError::Call {
                table: self.table.clone(),
                failure,
            }
        }
    }

    fn malformed(&self, key: &str, reason: impl Into<String>) -> LeaseError {
        LeaseError::Malformed {
            table: self.table.clone(),
            key: key.to_owned(),
            reason: reason.into(),
        }
    }

    fn number(&self, item: &Item, key: &str, name: &str) -> Result<Option<i64>, LeaseError> {
        match item.get(name) {
            None => Ok(None),
            Some(AttributeValue::N(text)) => text
                .parse()
                .map(Some)
                .map_err(|_| self.malformed(key, format!("{name} is not an integer"))),
            Some(_) => Err(self.malformed(key, format!("{name} is not a number"))),
        }
    }

    fn string(&self, item: &Item, key: &str, name: &str) -> Result<Option<String>, LeaseError> {
        match item.get(name) {
            None => Ok(None),
            Some(AttributeValue::S(text)) => Ok(Some(text.clone())),
            Some(_) => Err(self.malformed(key, format!("{name} is not a string"))),
        }
    }

    fn lease(
        &self,
        partition: PendingPartition,
        key: &str,
        item: &Item,
    ) -> Result<Lease, LeaseError> {
        let counter = self
            .number(item, key, attr::COUNTER)?
            .and_then(|c| u64::try_from(c).ok())
            .ok_or_else(|| self.malformed(key, format!("{} is missing", attr::COUNTER)))?;
        Ok(Lease {
            partition,
            owner: self.string(item, key, attr::OWNER)?,
            expires_at: self
                .number(item, key, attr::EXPIRES_AT)?
                .unwrap_or_default(),
            renewed_at: self
                .number(item, key, attr::RENEWED_AT)?
                .unwrap_or_default(),
            taken_at: self.number(item, key, attr::TAKEN_AT)?.unwrap_or_default(),
            counter,
            handoff_to: self.string(item, key, attr::HANDOFF_TO)?,
            last_pass_at: self.number(item, key, attr::LAST_PASS_AT)?,
        })
    }

    fn heartbeat_of(&self, owner: &str, key: &str, item: &Item) -> Result<Heartbeat, LeaseError> {
        Ok(Heartbeat {
            owner: owner.to_owned(),
            heartbeat_at: self
                .number(item, key, attr::HEARTBEAT_AT)?
                .unwrap_or_default(),
            expires_at: self
                .number(item, key, attr::EXPIRES_AT)?
                .unwrap_or_default(),
            started_at: self
                .number(item, key, attr::STARTED_AT)?
                .unwrap_or_default(),
            region: self
                .string(item, key, attr::REGION)?
                .map(|r| {
                    outbox_shared::region::Region::new(r)
                        .map_err(|e| self.malformed(key, e.to_string()))
                })
                .transpose()?,
        })
    }

    /// A lease as an `UpdateItem` with `ALL_NEW` returned it; `None` when the condition failed.
    fn updated(
        &self,
        partition: &PendingPartition,
        result: Result<
            aws_sdk_dynamodb::operation::update_item::UpdateItemOutput,
            SdkError<aws_sdk_dynamodb::operation::update_item::UpdateItemError>,
        >,
    ) -> Result<Option<Lease>, LeaseError> {
        match result {
            Ok(output) => {
                let key = partition_key(partition);
                let item = output.attributes.unwrap_or_default();
                self.lease(partition.clone(), &key, &item).map(Some)
            }
            Err(err) if is_condition_failed(&err) => Ok(None),
            Err(err) => Err(self.failure("UpdateItem", err)),
        }
    }

    fn written<T>(
        &self,
        result: Result<T, SdkError<aws_sdk_dynamodb::operation::update_item::UpdateItemError>>,
    ) -> Result<bool, LeaseError> {
        match result {
            Ok(_) => Ok(true),
            Err(err) if is_condition_failed(&err) => Ok(false),
            Err(err) => Err(self.failure("UpdateItem", err)),
        }
    }

    fn update(
        &self,
        partition: &PendingPartition,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(attr::LEASE_KEY, s(&partition_key(partition)))
            .expression_attribute_names("#owner", attr::OWNER)
    }

    /// An update by `owned.owner` of its lease on `partition`, on the condition that it still owns
    /// it at `owned.counter` (`and_condition` adds to that): it sets `set`, `#renewed = :now` and
    /// `#counter = :next`, records `owned.last_pass_at` when given, then applies `tail` (a
    /// `REMOVE` clause, or nothing). `#expires` is named for `set`.
    fn owner_update(
        &self,
        partition: &PendingPartition,
        owned: OwnedLease<'_>,
        set: &str,
        tail: &str,
        and_condition: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        let set_last_pass = if owned.last_pass_at.is_some() {
            ", #last = :last"
        } else {
            ""
        };
        let mut update = self
            .update(partition)
            .update_expression(format!(
                "SET {set}, #renewed = :now, #counter = :next{set_last_pass}{tail}"
            ))
            .condition_expression(format!("#owner = :me AND #counter = :seen{and_condition}"))
            .expression_attribute_names("#expires", attr::EXPIRES_AT)
            .expression_attribute_names("#renewed", attr::RENEWED_AT)
            .expression_attribute_names("#counter", attr::COUNTER)
            .expression_attribute_values(":me", s(owned.owner))
            .expression_attribute_values(":now", n(owned.now))
            .expression_attribute_values(":seen", n(owned.counter))
            .expression_attribute_values(":next", n(owned.counter + 1));
        if let Some(at) = owned.last_pass_at {
            update = update
                .expression_attribute_names("#last", attr::LAST_PASS_AT)
                .expression_attribute_values(":last", n(at));
        }
        update
    }
}

/// A lease as its owner knows it, for [`DynamoLeaseStore::owner_update`].
#[derive(Debug, Clone, Copy)]
struct OwnedLease<'a> {
    owner: &'a str,
    counter: u64,
    now: Millis,
    last_pass_at: Option<Millis>,
}

impl LeaseStore for DynamoLeaseStore {
    async fn read(&self) -> Result<LeaseView, LeaseError> {
        let mut view = LeaseView::default();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| self.failure("Scan", e))?;
            for item in page.items() {
                let Some(key) = item.get(attr::LEASE_KEY).and_then(|k| k.as_s().ok()) else {
                    continue;
                };
                if let Some(partition) = parse_partition_key(key) {
                    let lease = self.lease(partition.clone(), key, item)?;
                    view.leases.insert(partition, lease);
                } else if let Some(owner) = parse_poller_key(key) {
                    view.heartbeats
                        .insert(owner.to_owned(), self.heartbeat_of(owner, key, item)?);
                }
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(view);
            }
        }
    }

    async fn heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), LeaseError> {
        let ttl = heartbeat.heartbeat_at / 1000
            + i64::try_from(super::HEARTBEAT_RETENTION.as_secs()).unwrap_or(i64::MAX);
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(attr::LEASE_KEY, s(&poller_key(&heartbeat.owner)))
            .item(attr::OWNER, s(&heartbeat.owner))
            .item(attr::HEARTBEAT_AT, n(heartbeat.heartbeat_at))
            .item(attr::EXPIRES_AT, n(heartbeat.expires_at))
            .item(attr::STARTED_AT, n(heartbeat.started_at))
            .item(attr::TTL, n(ttl));
        let put = match &heartbeat.region {
            Some(region) => put.item(attr::REGION, s(region.as_str())),
            None => put,
        };
        put.send().await.map_err(|e| self.failure("PutItem", e))?;
        Ok(())
    }

    async fn remove_heartbeat(&self, owner: &str) -> Result<(), LeaseError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key(attr::LEASE_KEY, s(&poller_key(owner)))
            .send()
            .await
            .map_err(|e| self.failure("DeleteItem", e))?;
        Ok(())
    }

    async fn take(
        &self,
        partition: &PendingPartition,
        expect: Expect,
        owner: &str,
        term: Term,
    ) -> Result<Option<Lease>, LeaseError> {
        let Term {
            at: now,
            expires_at,
        } = term;
        let (condition, counter) = match expect {
            Expect::Missing => ("attribute_not_exists(#key)", 0),
            Expect::Counter(counter) => ("#counter = :seen", counter),
        };
        let mut update = self
            .update(partition)
            .update_expression(
                "SET #owner = :me, #expires = :expires, #renewed = :now, #taken = :now, \
                 #counter = :next REMOVE #handoff",
            )
            .condition_expression(condition)
            .expression_attribute_names("#expires", attr::EXPIRES_AT)
            .expression_attribute_names("#renewed", attr::RENEWED_AT)
            .expression_attribute_names("#taken", attr::TAKEN_AT)
            .expression_attribute_names("#counter", attr::COUNTER)
            .expression_attribute_names("#handoff", attr::HANDOFF_TO)
            .expression_attribute_values(":me", s(owner))
            .expression_attribute_values(":expires", n(expires_at))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":next", n(counter + 1))
            .return_values(ReturnValue::AllNew);
        update = match expect {
            Expect::Missing => update.expression_attribute_names("#key", attr::LEASE_KEY),
            Expect::Counter(seen) => update.expression_attribute_values(":seen", n(seen)),
        };
        self.updated(partition, update.send().await)
    }

    async fn renew(
        &self,
        partition: &PendingPartition,
        owner: &str,
        counter: u64,
        term: Term,
        last_pass_at: Option<Millis>,
    ) -> Result<Option<Lease>, LeaseError> {
        let owned = OwnedLease {
            owner,
            counter,
            now: term.at,
            last_pass_at,
        };
        let update = self
            .owner_update(partition, owned, "#expires = :expires", "", "")
            .expression_attribute_values(":expires", n(term.expires_at))
            .return_values(ReturnValue::AllNew);
        self.updated(partition, update.send().await)
    }

    async fn request_handoff(
        &self,
        partition: &PendingPartition,
        holder: &str,
        requester: &str,
    ) -> Result<bool, LeaseError> {
        let result = self
            .update(partition)
            .update_expression("SET #handoff = :requester")
            .condition_expression("#owner = :holder AND attribute_not_exists(#handoff)")
            .expression_attribute_names("#handoff", attr::HANDOFF_TO)
            .expression_attribute_values(":holder", s(holder))
            .expression_attribute_values(":requester", s(requester))
            .send()
            .await;
        self.written(result)
    }

    async fn hand_over(
        &self,
        partition: &PendingPartition,
        owner: &str,
        counter: u64,
        to: &str,
        term: Term,
        last_pass_at: Option<Millis>,
    ) -> Result<bool, LeaseError> {
        let owned = OwnedLease {
            owner,
            counter,
            now: term.at,
            last_pass_at,
        };
        let result = self
            .owner_update(
                partition,
                owned,
                "#owner = :to, #expires = :expires, #taken = :now",
                " REMOVE #handoff",
                " AND #handoff = :to",
            )
            .expression_attribute_names("#taken", attr::TAKEN_AT)
            .expression_attribute_names("#handoff", attr::HANDOFF_TO)
            .expression_attribute_values(":to", s(to))
            .expression_attribute_values(":expires", n(term.expires_at))
            .send()
            .await;
        self.written(result)
    }

    async fn withdraw_request(
        &self,
        partition: &PendingPartition,
        requester: &str,
    ) -> Result<bool, LeaseError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::LEASE_KEY, s(&partition_key(partition)))
            .update_expression("REMOVE #handoff")
            .condition_expression("#handoff = :me")
            .expression_attribute_names("#handoff", attr::HANDOFF_TO)
            .expression_attribute_values(":me", s(requester))
            .send()
            .await;
        self.written(result)
    }

    async fn clear_handoff(
        &self,
        partition: &PendingPartition,
        owner: &str,
    ) -> Result<bool, LeaseError> {
        let result = self
            .update(partition)
            .update_expression("REMOVE #handoff")
            .condition_expression("#owner = :me")
            .expression_attribute_names("#handoff", attr::HANDOFF_TO)
            .expression_attribute_values(":me", s(owner))
            .send()
            .await;
        self.written(result)
    }

    async fn release(
        &self,
        partition: &PendingPartition,
        owner: &str,
        counter: u64,
        now: Millis,
        last_pass_at: Option<Millis>,
    ) -> Result<bool, LeaseError> {
        let owned = OwnedLease {
            owner,
            counter,
            now,
            last_pass_at,
        };
        let result = self
            .owner_update(
                partition,
                owned,
                "#expires = :now",
                " REMOVE #owner, #handoff",
                "",
            )
            .expression_attribute_names("#handoff", attr::HANDOFF_TO)
            .send()
            .await;
        self.written(result)
    }
}

/// Creates the lease table `table` (key [`attr::LEASE_KEY`], on-demand billing, TTL on
/// [`attr::TTL`]) unless it exists, and waits until it is active. Several pollers may call it at
/// once: the ones that lose the race find it created.
///
/// # Errors
/// [`LeaseError`] when the table can neither be created nor described, or does not become active
/// within a minute.
pub async fn create_lease_table(client: &Client, table: &str) -> Result<(), LeaseError> {
    let store = DynamoLeaseStore::new(client.clone(), table);
    let created = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(attr::LEASE_KEY)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("name and type are set"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(attr::LEASE_KEY)
                .key_type(KeyType::Hash)
                .build()
                .expect("name and key type are set"),
        )
        .send()
        .await;
    match created {
        Ok(_) => tracing::info!(table, "lease table created"),
        Err(err)
            if err
                .as_service_error()
                .and_then(ProvideErrorMetadata::code)
                .is_some_and(|c| c == "ResourceInUseException") =>
        {
            tracing::debug!(table, "lease table exists");
        }
        Err(err) => return Err(store.failure("CreateTable", err)),
    }
    let deadline = tokio::time::Instant::now() + CREATE_TIMEOUT;
    loop {
        let described = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| store.failure("DescribeTable", e))?;
        let status = described.table().and_then(|t| t.table_status().cloned());
        if status == Some(TableStatus::Active) {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(store.malformed(
                table,
                format!(
                    "not active {}s after its creation",
                    CREATE_TIMEOUT.as_secs()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // TTL only cleans up the heartbeats of pollers that died: failing to set it is not fatal.
    let ttl = TimeToLiveSpecification::builder()
        .enabled(true)
        .attribute_name(attr::TTL)
        .build()
        .expect("enabled and name are set");
    if let Err(err) = client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(ttl)
        .send()
        .await
    {
        let already = err
            .as_service_error()
            .and_then(ProvideErrorMetadata::message)
            .is_some_and(|m| m.contains("already enabled"));
        if !already {
            tracing::warn!(table, error = %aws_sdk_dynamodb::error::DisplayErrorContext(&err), "could not enable TTL on the lease table; heartbeats of stopped pollers stay until deleted");
        }
    }
    Ok(())
}
