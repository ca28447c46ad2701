//! The external source the replicas ingest: an append-only log of upserts, each with its
//! offset (the FromTime) and the time it was reclocked to, like a Kafka topic with its remap.
//!
//! - [`SourceLog`] is shared by every replica (it is "outside" them). Messages are appended in
//!   time order, offsets increase; [`SourceLog::seal`] moves its upper (every message before it
//!   is in). Upserts come from a [`SourceGenerator`] (seeded: keys, values, deletes, errors,
//!   bursts at one time) or by hand ([`SourceLog::push`]).
//! - [`SourceReader`] is one replica's cursor: it reads at its own pace, hands its replica the
//!   next messages (shuffled within each read, so FromTime order and arrival order differ), and
//!   says how far the replica's source frontier may go: the time of the next unread message, or
//!   the log's upper once everything is read.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

use super::error::SourceSealed;
use super::types::{kv_row, UpsertError, UpsertKey, UpsertValue};
use super::worker::SourceUpdate;
use crate::persist::codec::{Datum, Row, Timestamp};

/// One upsert of the source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceMessage {
    /// The key (an integer key column).
    pub key: i64,
    /// The new value, or `None` for a delete.
    pub value: Option<UpsertValue>,
    /// Its offset: the FromTime, unique and increasing in the log.
    pub offset: u64,
    /// The time it was reclocked to.
    pub ts: Timestamp,
}

impl SourceMessage {
    /// The key row (`[key]`).
    pub fn key_row(&self) -> Row {
        Row::new([Datum::Int(self.key)])
    }

    /// As an update of the operator's source input.
    pub fn to_update(&self) -> SourceUpdate {
        (
            (
                UpsertKey::from_key(&self.key_row()),
                self.value.clone(),
                self.offset,
            ),
            self.ts,
            1,
        )
    }
}

/// The shared log. See the module docs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceLog {
    messages: Vec<SourceMessage>,
    upper: Timestamp,
    next_offset: u64,
    /// Messages whose value is an error (undecodable), and the index of the latest.
    undecodable: u64,
    last_undecodable: Option<usize>,
}

impl SourceLog {
    /// An empty log with upper 0.
    pub fn new() -> Self {
        SourceLog {
            messages: Vec::new(),
            upper: 0,
            next_offset: 1,
            undecodable: 0,
            last_undecodable: None,
        }
    }

    /// How many messages carry an error for a value (undecodable), and the latest of them.
    pub fn undecodable(&self) -> (u64, Option<&SourceMessage>) {
        let last = self.last_undecodable.and_then(|i| self.messages.get(i));
        (self.undecodable, last)
    }

    /// Every message.
    pub fn messages(&self) -> &[SourceMessage] {
        &self.messages
    }

    /// Every message before this time is in the log.
    pub fn upper(&self) -> Timestamp {
        self.upper
    }

    /// Appends an upsert of `key` at `ts` (at or beyond the upper and the last message's time).
    pub fn push(
        &mut self,
        key: i64,
        value: Option<UpsertValue>,
        ts: Timestamp,
    ) -> Result<u64, SourceSealed> {
        let last = self.messages.last().map_or(0, |m| m.ts);
        if ts < self.upper || ts < last {
            return Err(SourceSealed {
                ts,
                upper: self.upper,
                last,
            });
        }
        let offset = self.next_offset;
        self.next_offset += 1;
        if matches!(value, Some(Err(_))) {
            self.undecodable += 1;
            self.last_undecodable = Some(self.messages.len());
        }
        self.messages.push(SourceMessage {
            key,
            value,
            offset,
            ts,
        });
        Ok(offset)
    }

    /// Moves the upper to `upper` (never back).
    pub fn seal(&mut self, upper: Timestamp) {
        self.upper = self.upper.max(upper);
    }

    /// `text` with the source's own key named after each key hash it quotes: a state error names
    /// its key by hash (`key 1a2b3c4d5e6f`, [`UpsertKey::short`]), which nobody recognises, so
    /// this adds the key column of the messages whose key hashes to it: `key 1a2b3c4d5e6f (the
    /// source's key 6)`. A hash no message has is left as it is.
    pub fn name_keys(&self, text: &str) -> String {
        const PREFIX: &str = "key ";
        const HEX: usize = 12;
        if !text.contains(PREFIX) {
            return text.to_string();
        }
        // Inserted one by one: `collect` into a BTreeSet sorts first, a sort compiled for this
        // type alone.
        let mut keys = std::collections::BTreeSet::new();
        for m in &self.messages {
            keys.insert(m.key);
        }
        let named: Vec<(String, i64)> = keys
            .into_iter()
            .map(|k| (UpsertKey::from_key(&Row::new([Datum::Int(k)])).short(), k))
            .collect();
        let mut out = String::with_capacity(text.len() + 24);
        let mut rest = text;
        while let Some(i) = rest.find(PREFIX) {
            let after = &rest[i + PREFIX.len()..];
            let hex = after.get(..HEX).filter(|h| {
                h.bytes().all(|b| b.is_ascii_hexdigit())
                    && !after[HEX..].starts_with(|c: char| c.is_ascii_hexdigit())
            });
            let end = i + PREFIX.len() + hex.map_or(0, str::len);
            out.push_str(&rest[..end]);
            if let Some((_, k)) = hex.and_then(|h| named.iter().find(|(s, _)| s == h)) {
                out.push_str(&format!(" (the source's key {k})"));
            }
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    }
}

/// Knobs of the generator.
#[derive(Debug, Clone, Serialize)]
pub struct GeneratorConfig {
    /// Keys are drawn from `0..keys`.
    pub keys: u64,
    /// Percent of upserts that are deletes.
    pub delete_percent: u64,
    /// Percent of upserts whose value is an error.
    pub error_percent: u64,
    /// Upserts per time: from 1 (or the generator's [`SourceGenerator::with_burst_min`]) to this
    /// many (a burst at one time).
    pub burst_max: u64,
    /// Times advance by 1 to this many between bursts.
    pub ts_step_max: u64,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            keys: 8,
            delete_percent: 15,
            error_percent: 5,
            burst_max: 6,
            ts_step_max: 2,
        }
    }
}

/// A seeded generator of upserts. See the module docs.
pub struct SourceGenerator {
    rng: Xoshiro256PlusPlus,
    cfg: GeneratorConfig,
    next_ts: Timestamp,
    values: u64,
    burst_min: u64,
    undecodable: bool,
}

impl SourceGenerator {
    /// A generator whose first burst is at `start_ts`.
    pub fn new(seed: u64, cfg: GeneratorConfig, start_ts: Timestamp) -> Self {
        SourceGenerator {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            cfg,
            next_ts: start_ts,
            values: 0,
            burst_min: 1,
            undecodable: true,
        }
    }

    /// Whether it makes undecodable values (its `error_percent`) or none: the rolls that would
    /// have made one make a value instead, so the rest of the sequence is the same.
    pub fn set_undecodable(&mut self, on: bool) {
        self.undecodable = on;
    }

    /// Every burst has at least `n` upserts (at most the config's `burst_max`, if larger).
    pub fn with_burst_min(mut self, n: u64) -> Self {
        self.burst_min = n.max(1);
        self
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }

    /// One burst of upserts at the next time, then seals the log past it. Returns its time.
    pub fn burst(&mut self, log: &mut SourceLog) -> Timestamp {
        let ts = self.next_ts.max(log.upper);
        let min = self.burst_min;
        let n = min + self.below(self.cfg.burst_max.saturating_sub(min) + 1);
        for _ in 0..n {
            let key = self.below(self.cfg.keys) as i64;
            let roll = self.below(100);
            let value = if roll < self.cfg.delete_percent {
                None
            } else if self.undecodable && roll < self.cfg.delete_percent + self.cfg.error_percent {
                Some(Err(UpsertError::Value {
                    for_key: Row::new([Datum::Int(key)]),
                    message: format!("undecodable on purpose (the generator's) #{}", self.values),
                }))
            } else {
                Some(Ok(kv_row(key, &format!("v{}", self.values))))
            };
            self.values += 1;
            // The log accepts it: ts is at or beyond its upper and its last message.
            let _ = log.push(key, value, ts);
        }
        log.seal(ts + 1);
        self.next_ts = ts + 1 + self.below(self.cfg.ts_step_max);
        ts
    }
}

/// One replica's cursor into the log. See the module docs.
#[derive(Debug, Clone)]
pub struct SourceReader {
    next: usize,
    rng: Xoshiro256PlusPlus,
    // Messages read from the log but held back for a later read (arrival order is not offset
    // order); the frontier never passes them.
    held: Vec<SourceUpdate>,
}

impl SourceReader {
    /// A reader that starts at the first message at or after `resume_upper`, backed up by
    /// `replay` messages (a restarted source re-reads a little; the operator drops those).
    pub fn new(log: &SourceLog, resume_upper: Timestamp, replay: usize, seed: u64) -> Self {
        let first = log.messages.partition_point(|m| m.ts < resume_upper);
        SourceReader {
            next: first.saturating_sub(replay),
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            held: Vec::new(),
        }
    }

    /// Reads up to `max` more messages and delivers a shuffled part of what it holds (the rest
    /// waits for a later read); returns them and the frontier the replica's source may advance
    /// to (never past a held message).
    pub fn read(&mut self, log: &SourceLog, max: usize) -> (Vec<SourceUpdate>, Timestamp) {
        self.read_before(log, max, Timestamp::MAX)
    }

    /// Reads like [`SourceReader::read`], but no message at or after time `end`: a host walking
    /// one message through leaves the later ones (pushed meanwhile) unread for a walk of their own.
    pub fn read_before(
        &mut self,
        log: &SourceLog,
        max: usize,
        end: Timestamp,
    ) -> (Vec<SourceUpdate>, Timestamp) {
        let limit = log.messages.partition_point(|m| m.ts < end).max(self.next);
        let end = (self.next + max).min(limit);
        self.held.extend(
            log.messages[self.next..end]
                .iter()
                .map(SourceMessage::to_update),
        );
        self.next = end;
        // Fisher-Yates with the reader's own seed: arrival order differs from offset order.
        for i in (1..self.held.len()).rev() {
            let j = (self.rng.next_u64() % (i as u64 + 1)) as usize;
            self.held.swap(i, j);
        }
        // Deliver at most `max`; now and then hold back a random part for a later read.
        let mut keep = self.held.len().saturating_sub(max);
        if self.held.len() > 1 && self.rng.next_u64() % 3 == 0 {
            keep = keep.max((self.rng.next_u64() % self.held.len() as u64) as usize);
        }
        let out = self.held.split_off(keep);
        let next_ts = log.messages.get(self.next).map_or(log.upper, |m| m.ts);
        let frontier = self
            .held
            .iter()
            .map(|(_, t, _)| *t)
            .min()
            .map_or(next_ts, |h| h.min(next_ts));
        (out, frontier)
    }

    /// Messages not yet read.
    pub fn unread(&self, log: &SourceLog) -> usize {
        log.messages.len() - self.next.min(log.messages.len()) + self.held.len()
    }

    /// The offsets of the messages not yet read (held back ones first, then the log's rest).
    pub fn unread_offsets(&self, log: &SourceLog) -> Vec<u64> {
        let rest = log.messages.get(self.next..).unwrap_or(&[]);
        self.held
            .iter()
            .map(|((_, _, offset), _, _)| *offset)
            .chain(rest.iter().map(|m| m.offset))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_appends_bursts_in_time_order_and_readers_see_them_all() {
        let mut log = SourceLog::new();
        let mut gen = SourceGenerator::new(3, GeneratorConfig::default(), 1);
        for _ in 0..20 {
            gen.burst(&mut log);
        }
        let ms = log.messages();
        assert!(ms
            .windows(2)
            .all(|w| w[0].ts <= w[1].ts && w[0].offset < w[1].offset));
        assert!(ms.iter().any(|m| m.value.is_none()));
        let errors: Vec<&SourceMessage> = ms
            .iter()
            .filter(|m| matches!(m.value, Some(Err(_))))
            .collect();
        assert!(!errors.is_empty(), "the generator made undecodable values");
        let (count, last) = log.undecodable();
        assert_eq!(count, errors.len() as u64, "the log counts them");
        assert_eq!(last, errors.last().copied(), "and keeps the latest");
        assert_eq!(log.upper(), ms.last().unwrap().ts + 1);
        let mut r = SourceReader::new(&log, 0, 0, 9);
        let mut seen = 0;
        let mut last_frontier = 0;
        while r.unread(&log) > 0 {
            let (batch, frontier) = r.read(&log, 4);
            assert!(batch.iter().all(|(_, t, _)| *t >= last_frontier));
            assert!(frontier >= last_frontier);
            last_frontier = frontier;
            seen += batch.len();
        }
        assert_eq!(seen, ms.len());
        assert_eq!(last_frontier, log.upper());
        assert!(log.push(0, None, 0).is_err(), "before the upper");
    }

    #[test]
    fn a_key_hash_in_an_error_gets_the_source_key_it_stands_for() {
        let mut log = SourceLog::new();
        log.push(6, None, 1).unwrap();
        log.push(2, None, 1).unwrap();
        let six = UpsertKey::from_key(&Row::new([Datum::Int(6)])).short();
        let seven = UpsertKey::from_key(&Row::new([Datum::Int(7)])).short();
        let text = format!("invalid upsert state for key {six}: diff_sum is 2, not 0 or 1");
        assert_eq!(
            log.name_keys(&text),
            format!(
                "invalid upsert state for key {six} (the source's key 6): diff_sum is 2, not 0 or 1"
            )
        );
        // A hash no message has, a key that is no hash, and text with no key stay as they are.
        let other = format!("key {seven}, key 12, the key ? and monkey business");
        assert_eq!(log.name_keys(&other), other);
        assert_eq!(log.name_keys("no keys here"), "no keys here");
    }
}
