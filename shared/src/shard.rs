//! The shard function: which `GSI1` shard a pending event is indexed under.
//!
//! `shard = FNV-1a-32(UTF-8 bytes of the aggregate id) mod shard_count`
//!
//! FNV-1a 32-bit starts from the offset basis `0x811C9DC5`; for each byte it XORs the byte in and
//! multiplies by the prime `0x01000193`, wrapping at 32 bits. It is a few lines in any language, so
//! any client can index events exactly as this crate does; `testdata/shard_vectors.json` holds the
//! published test vectors (checked by this module's tests).
//!
//! One aggregate's events always share a shard, so the poller, which reads each shard oldest first,
//! publishes them in order.

use std::fmt;
use std::num::NonZeroU16;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

const FNV_OFFSET_BASIS: u32 = 0x811C_9DC5;
const FNV_PRIME: u32 = 0x0100_0193;

/// Upper bound on the shard count: each shard is one query per poller pass, and beyond this the
/// cost of polling empty shards outweighs any gain in spreading writes.
pub const MAX_SHARD_COUNT: u16 = 1024;

/// Default shard count, shared by the writer and the poller.
pub const DEFAULT_SHARD_COUNT: u16 = 16;

/// The number of `GSI1` shards: 1 ..= [`MAX_SHARD_COUNT`]. Writer and poller must agree on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct ShardCount(NonZeroU16);

/// A shard count outside 1 ..= [`MAX_SHARD_COUNT`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shard count must be between 1 and {MAX_SHARD_COUNT}, got {0}")]
pub struct InvalidShardCount(pub String);

impl ShardCount {
    /// # Errors
    /// [`InvalidShardCount`] when `count` is 0 or above [`MAX_SHARD_COUNT`].
    pub fn new(count: u16) -> Result<Self, InvalidShardCount> {
        match NonZeroU16::new(count) {
            Some(n) if count <= MAX_SHARD_COUNT => Ok(Self(n)),
            _ => Err(InvalidShardCount(count.to_string())),
        }
    }

    pub fn get(self) -> u16 {
        self.0.get()
    }

    /// Every shard number, `0 .. count`.
    pub fn shards(self) -> impl Iterator<Item = u16> {
        0..self.get()
    }
}

impl Default for ShardCount {
    fn default() -> Self {
        Self(NonZeroU16::new(DEFAULT_SHARD_COUNT).expect("default shard count is non-zero"))
    }
}

impl TryFrom<u16> for ShardCount {
    type Error = InvalidShardCount;
    fn try_from(value: u16) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<ShardCount> for u16 {
    fn from(value: ShardCount) -> Self {
        value.get()
    }
}

impl FromStr for ShardCount {
    type Err = InvalidShardCount;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let n: u16 = s
            .trim()
            .parse()
            .map_err(|_| InvalidShardCount(s.to_owned()))?;
        Self::new(n)
    }
}

impl fmt::Display for ShardCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

/// FNV-1a, 32-bit, over `bytes`.
pub fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |hash, &byte| {
        (hash ^ u32::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// The shard of an aggregate: `fnv1a_32(aggregate_id) mod count`.
pub fn shard_for(aggregate_id: &str, count: ShardCount) -> u16 {
    let shard = fnv1a_32(aggregate_id.as_bytes()) % u32::from(count.get());
    u16::try_from(shard).expect("a value below a u16 modulus fits in u16")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Vectors {
        fnv1a_32: Vec<HashVector>,
        shards: Vec<ShardVector>,
    }
    #[derive(Deserialize)]
    struct HashVector {
        input: String,
        hash: u32,
    }
    #[derive(Deserialize)]
    struct ShardVector {
        aggregate_id: String,
        shard_count: u16,
        shard: u16,
    }

    fn vectors() -> Vectors {
        serde_json::from_str(include_str!("../testdata/shard_vectors.json")).unwrap()
    }

    #[test]
    fn matches_the_published_fnv1a_vectors() {
        for v in vectors().fnv1a_32 {
            assert_eq!(fnv1a_32(v.input.as_bytes()), v.hash, "input {:?}", v.input);
        }
    }

    #[test]
    fn matches_the_published_shard_vectors() {
        for v in vectors().shards {
            let count = ShardCount::new(v.shard_count).unwrap();
            assert_eq!(
                shard_for(&v.aggregate_id, count),
                v.shard,
                "{:?}",
                v.aggregate_id
            );
        }
    }

    #[test]
    fn spreads_ids_over_all_shards() {
        let count = ShardCount::new(16).unwrap();
        let mut hits = [0u32; 16];
        for i in 0..16_000 {
            hits[usize::from(shard_for(&format!("order-{i}"), count))] += 1;
        }
        // A uniform spread puts 1,000 in each shard; allow generous noise, but no starved shard.
        assert!(hits.iter().all(|&h| (800..1200).contains(&h)), "{hits:?}");
    }

    #[test]
    fn rejects_out_of_range_counts() {
        assert!(ShardCount::new(0).is_err());
        assert!(ShardCount::new(MAX_SHARD_COUNT + 1).is_err());
        assert!("abc".parse::<ShardCount>().is_err());
        assert_eq!("16".parse::<ShardCount>().unwrap().get(), 16);
    }
}
