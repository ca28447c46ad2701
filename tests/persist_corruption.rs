//! Broken bytes end in a typed error, in bounded virtual time, and nothing is written after.
//!
//! For each of five kinds of damage (a corrupted head version, a corrupted diff in the middle of
//! the chain, a corrupted rollup, a missing rollup blob, a missing part blob), and for both a
//! fresh open (a new process: cold cache) and a warm handle (one that read the shard before the
//! damage and must catch up through it), on the simulator:
//! - the call answers `PersistError::Permanent` naming the shard, the seqno or Blob key, and the
//!   kind of problem, well inside a virtual deadline (a transient retry loop would hit it);
//! - after the error the same process writes nothing more (no Consensus version, no blob), even
//!   when it keeps calling and its maintenance has virtual time to run.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeSet;
use std::rc::Rc;

use bytes::Bytes;
use futures::FutureExt;
use persist_playground::location::mem::{Latency, MemBlob, MemConsensus};
use persist_playground::location::{
    Blob, BrokenAt, Consensus, Location, PermanentError, PermanentKind, SeqNo,
};
use persist_playground::persist::error::PersistError;
use persist_playground::persist::gc::gc_now;
use persist_playground::persist::state::{IdempotencyToken, WriterId, WriterState};
use persist_playground::persist::write::WriteHandle;
use persist_playground::persist::{PersistClient, PersistConfig, ShardId};
use persist_playground::runtime::sim::Simulator;
use timely::progress::Antichain;

const SHARD: &str = "s-broken";
/// Far more than any answer needs; a retry loop at the back-off cap would run into it.
const DEADLINE_MS: u64 = 120_000;
/// What an answer may take: a few back-offs of a few milliseconds, plus latency.
const ANSWER_BOUND_MS: u64 = 2_000;

fn f(t: u64) -> Antichain<u64> {
    Antichain::from_elem(t)
}

fn shard() -> ShardId {
    ShardId::new(SHARD).unwrap()
}

struct World {
    sim: Simulator,
    blob: MemBlob,
    consensus: MemConsensus,
    location: Location,
    cfg: PersistConfig,
}

fn world(seed: u64) -> World {
    let sim = Simulator::new(seed);
    let rt = sim.runtime();
    let (blob, consensus) = (MemBlob::new(), MemConsensus::new());
    let location = Location {
        blob: Rc::new(blob.with_latency(Latency::new(rt.clone(), seed ^ 1, 0, 3))),
        consensus: Rc::new(consensus.with_latency(Latency::new(rt, seed ^ 2, 0, 3))),
    };
    let cfg = PersistConfig {
        // Every batch in Blob, and no routine maintenance: the damage is placed by hand.
        inline_writes_single_max_bytes: 0,
        compaction_enabled: false,
        gc_enabled: false,
        rollup_threshold: 0,
        ..PersistConfig::default()
    };
    World {
        sim,
        blob,
        consensus,
        location,
        cfg,
    }
}

impl World {
    fn client(&self, seed: u64) -> PersistClient {
        PersistClient::new(
            self.location.clone(),
            self.sim.runtime(),
            self.cfg.clone(),
            seed,
        )
    }

    fn head(&self) -> SeqNo {
        self.consensus
            .head(SHARD)
            .now_or_never()
            .unwrap()
            .unwrap()
            .unwrap()
            .seqno
    }

    fn blob_keys(&self) -> BTreeSet<String> {
        let mut keys = BTreeSet::new();
        self.blob
            .list_keys_and_metadata("", &mut |m| {
                keys.insert(m.key);
            })
            .now_or_never()
            .unwrap()
            .unwrap();
        keys
    }

    /// What storage holds: the head seqno and every blob key.
    fn footprint(&self) -> (SeqNo, BTreeSet<String>) {
        (self.head(), self.blob_keys())
    }

    fn state(&self) -> persist_playground::persist::state::State {
        let client = self.client(0x5eed);
        self.sim
            .block_on(async move { client.inspect_state(&shard()).await.unwrap() })
            .unwrap()
    }
}

/// Writes `n` one-update batches from `handle`'s upper on.
async fn write(handle: &mut WriteHandle<String, ()>, n: u64) {
    for _ in 0..n {
        let lo = *handle.upper().elements().first().unwrap();
        let updates = vec![((format!("k{lo}"), ()), lo, 1)];
        handle
            .compare_and_append(&updates, f(lo), f(lo + 1))
            .await
            .unwrap()
            .unwrap();
    }
}

/// Where the damage goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    CorruptHead,
    CorruptMidChain,
    CorruptRollup,
    MissingRollup,
    MissingPart,
}

impl Damage {
    fn all() -> [Damage; 5] {
        [
            Damage::CorruptHead,
            Damage::CorruptMidChain,
            Damage::CorruptRollup,
            Damage::MissingRollup,
            Damage::MissingPart,
        ]
    }

    /// Whether the shard is collected up to its head first (so that readers start from a
    /// rollup at the head, and a warm handle's next diffs are truncated away).
    fn collected(self) -> bool {
        matches!(self, Damage::CorruptRollup | Damage::MissingRollup)
    }

    /// Damages storage and says where the error must point.
    fn apply(self, w: &World, warm_seqno: SeqNo) -> (BrokenAt, PermanentKind) {
        let state = w.state();
        let head = w.head();
        let garbage = Bytes::from_static(b"not a state version");
        match self {
            Damage::CorruptHead => {
                assert!(w.consensus.tamper(SHARD, head, Bytes::new()));
                (BrokenAt::Version(head), PermanentKind::Undecodable)
            }
            Damage::CorruptMidChain => {
                // Above the warm handle's seqno and the newest rollup, below the head.
                let (rollup, _) = state.latest_rollup().unwrap();
                let mid = SeqNo(warm_seqno.0.max(rollup.0) + 2);
                assert!(mid < head, "{mid} < {head}");
                assert!(w.consensus.tamper(SHARD, mid, garbage));
                (BrokenAt::Version(mid), PermanentKind::Undecodable)
            }
            Damage::CorruptRollup | Damage::MissingRollup => {
                let (_, rollup) = state.latest_rollup().unwrap();
                let key = rollup.key.clone();
                if self == Damage::CorruptRollup {
                    w.blob.set(&key, garbage).now_or_never().unwrap().unwrap();
                    (BrokenAt::BlobKey(key), PermanentKind::Undecodable)
                } else {
                    w.blob.delete(&key).now_or_never().unwrap().unwrap();
                    (BrokenAt::BlobKey(key), PermanentKind::Missing)
                }
            }
            Damage::MissingPart => {
                let key = state.part_keys().next().unwrap().to_string();
                w.blob.delete(&key).now_or_never().unwrap().unwrap();
                (BrokenAt::BlobKey(key), PermanentKind::Missing)
            }
        }
    }
}

fn check_error(
    damage: Damage,
    how: &str,
    err: &PermanentError,
    (at, kind): &(BrokenAt, PermanentKind),
) {
    assert_eq!(err.shard, SHARD, "{damage:?} {how}: {err}");
    assert_eq!(&err.at, at, "{damage:?} {how}: {err}");
    assert_eq!(&err.kind, kind, "{damage:?} {how}: {err}");
}

fn permanent<T: std::fmt::Debug>(r: Result<T, PersistError>, what: &str) -> PermanentError {
    match r {
        Err(PersistError::Permanent(e)) => e,
        other => panic!("{what}: expected a permanent error, got {other:?}"),
    }
}

type Reader = persist_playground::persist::read::ReadHandle<String, ()>;

/// The shard with some history: writer `a` (kept: the warm handle) wrote 3 batches, then writer
/// `b` of another process 8 more. For the part damage, `a`'s process also keeps a reader (it
/// holds GC back, so only then). Returns `a`, the reader, and the seqno `a`'s cache is at.
fn prepare(
    w: &World,
    damage: Damage,
) -> (
    PersistClient,
    WriteHandle<String, ()>,
    Option<Reader>,
    SeqNo,
) {
    let warm = w.client(1);
    let warm_client = warm.clone();
    let with_reader = damage == Damage::MissingPart;
    let (a, r) = w
        .sim
        .block_on(async move {
            let mut a = warm.open_writer::<String, ()>(&shard()).await.unwrap();
            let r = if with_reader {
                Some(
                    warm.open_leased_reader::<String, ()>(&shard())
                        .await
                        .unwrap(),
                )
            } else {
                None
            };
            write(&mut a, 3).await;
            (a, r)
        })
        .unwrap();
    let warm_seqno = w.head();
    let other = w.client(2);
    let collect = damage.collected();
    w.sim
        .block_on(async move {
            let mut b = other.open_writer::<String, ()>(&shard()).await.unwrap();
            b.fetch_recent_upper().await.unwrap();
            write(&mut b, 8).await;
            if collect {
                // Truncates to the head, with a rollup there.
                gc_now(&other, &shard()).await.unwrap();
            }
            b.abandon();
        })
        .unwrap();
    (warm_client, a, r, warm_seqno)
}

/// The first call that meets the damage, bounded by [`DEADLINE_MS`].
async fn first_call(
    damage: Damage,
    warm: bool,
    fresh: PersistClient,
    a: &mut WriteHandle<String, ()>,
    r: &mut Option<Reader>,
) -> Result<PermanentError, String> {
    let rt = fresh.runtime().clone();
    let out: Result<Result<(), PersistError>, _> = match (warm, damage == Damage::MissingPart) {
        (true, true) => {
            let r = r.as_mut().unwrap();
            rt.timeout(DEADLINE_MS, r.snapshot_and_fetch(f(5)))
                .await
                .map(|x| x.map(|_| ()))
        }
        (true, false) => {
            let lo = *a.upper().elements().first().unwrap();
            let updates = vec![(("late".to_string(), ()), lo, 1)];
            rt.timeout(
                DEADLINE_MS,
                a.compare_and_append(&updates, f(lo), f(lo + 1)),
            )
            .await
            .map(|x| x.map(|_| ()))
        }
        (false, true) => {
            rt.timeout(DEADLINE_MS, async {
                let mut reader = fresh.open_leased_reader::<String, ()>(&shard()).await?;
                reader.snapshot_and_fetch(f(5)).await.map(|_| ())
            })
            .await
        }
        (false, false) => rt
            .timeout(DEADLINE_MS, fresh.open_writer::<String, ()>(&shard()))
            .await
            .map(|x| x.map(|_| ())),
    };
    match out {
        Err(_elapsed) => Err("timed out".into()),
        Ok(r) => Ok(permanent(r, "first call")),
    }
}

#[test]
fn broken_bytes_are_permanent_errors_for_fresh_and_warm_handles() {
    for (i, damage) in Damage::all().into_iter().enumerate() {
        for warm in [false, true] {
            let how = if warm { "warm" } else { "fresh" };
            let w = world(100 + i as u64 * 2 + u64::from(warm));
            let (warm_client, mut a, mut r, warm_seqno) = prepare(&w, damage);
            let expected = damage.apply(&w, warm_seqno);
            let start = w.sim.now_ms();
            let fresh = w.client(77);
            let (out, a, r) = {
                let fresh = fresh.clone();
                w.sim
                    .block_on(async move {
                        let out = first_call(damage, warm, fresh, &mut a, &mut r).await;
                        (out, a, r)
                    })
                    .unwrap()
            };
            let err = out.unwrap_or_else(|e| panic!("{damage:?} {how}: {e}"));
            let took = w.sim.now_ms() - start;
            println!("{damage:?} {how}: {err} (after {took} ms)");
            check_error(damage, how, &err, &expected);
            assert!(took < ANSWER_BOUND_MS, "{damage:?} {how}: took {took} ms");
            // From here on, the process that met the damage writes nothing: calls on it answer
            // the same error at once, and its handles' expiry on drop and its background work
            // (given virtual time) commit nothing.
            let after = w.footprint();
            let broken = if warm { warm_client } else { fresh };
            let again = w
                .sim
                .block_on(async move {
                    let reopened = broken.open_writer::<String, ()>(&shard()).await.map(|_| ());
                    let state = broken.inspect_state(&shard()).await;
                    (permanent(reopened, "reopen"), state.err())
                })
                .unwrap();
            assert_eq!(again.0, err, "{damage:?} {how}: the process stays broken");
            assert_eq!(again.1, Some(err.clone()), "{damage:?} {how}");
            if warm {
                drop((a, r));
            } else {
                // The warm process did not meet the damage here: keep it out of the way.
                a.abandon();
                if let Some(r) = r {
                    r.abandon();
                }
            }
            w.sim.run_for(10_000).unwrap();
            assert_eq!(
                w.footprint(),
                after,
                "{damage:?} {how}: wrote after the error"
            );
        }
    }
}

/// Compaction and GC, run by hand on a fresh process, meet the damage too: a typed error, and
/// nothing written after it.
#[test]
fn compaction_and_gc_answer_permanent_errors() {
    use persist_playground::persist::compact::compact_now;
    let cases = [
        (Damage::MissingPart, "compact"),
        (Damage::CorruptMidChain, "gc"),
        (Damage::CorruptHead, "compact"),
    ];
    for (i, (damage, work)) in cases.into_iter().enumerate() {
        let w = world(300 + i as u64);
        let (_, a, r, warm_seqno) = prepare(&w, damage);
        a.abandon();
        if let Some(r) = r {
            r.abandon();
        }
        let expected = damage.apply(&w, warm_seqno);
        let before = w.footprint();
        let client = w.client(91);
        let rt = w.sim.runtime();
        let start = w.sim.now_ms();
        let out = w
            .sim
            .block_on(async move {
                let out = if work == "gc" {
                    rt.timeout(DEADLINE_MS, gc_now(&client, &shard()))
                        .await
                        .map(|r| r.map(|_| ()))
                } else {
                    rt.timeout(DEADLINE_MS, compact_now(&client, &shard()))
                        .await
                        .map(|r| r.map(|_| ()))
                };
                let again = compact_now(&client, &shard()).await.map(|_| ());
                (out, again)
            })
            .unwrap();
        let err = out
            .0
            .unwrap_or_else(|_| panic!("{damage:?} {work}: timed out"))
            .unwrap_err();
        assert!(w.sim.now_ms() - start < ANSWER_BOUND_MS);
        check_error(damage, work, &err, &expected);
        assert_eq!(
            out.1,
            Err(err),
            "{damage:?} {work}: the process stays broken"
        );
        w.sim.run_for(10_000).unwrap();
        assert_eq!(
            w.footprint(),
            before,
            "{damage:?} {work}: wrote after the error"
        );
    }
}

/// Background maintenance that meets damage breaks its process: a writer whose compaction finds
/// a part gone that the state still lists answers the permanent error on its next write, and
/// neither it nor its maintenance writes anything after.
#[test]
fn background_compaction_meeting_damage_stops_the_writer() {
    let mut w = world(400);
    w.cfg.compaction_enabled = true;
    // Merge the first two batches (the spine plans it) without waiting for more inputs.
    w.cfg.compaction_min_inputs = 2;
    let client = w.client(5);
    let c = client.clone();
    let mut writer = w
        .sim
        .block_on(async move {
            let mut writer = c.open_writer::<String, ()>(&shard()).await.unwrap();
            write(&mut writer, 1).await;
            writer
        })
        .unwrap();
    // The first batch's only part goes missing; the second append assigns the merge of both.
    let state = w.state();
    let key = state.part_keys().next().unwrap().to_string();
    w.blob.delete(&key).now_or_never().unwrap().unwrap();
    writer = w
        .sim
        .block_on(async move {
            write(&mut writer, 1).await;
            writer
        })
        .unwrap();
    w.sim.run_for(2_000).unwrap();
    let after = w.footprint();
    let (out, writer) = w
        .sim
        .block_on(async move {
            let out = append_one(&mut writer).await;
            (out, writer)
        })
        .unwrap();
    let err = permanent(out, "the write after the broken compaction");
    check_error(
        Damage::MissingPart,
        "background",
        &err,
        &(BrokenAt::BlobKey(key), PermanentKind::Missing),
    );
    drop(writer);
    w.sim.run_for(10_000).unwrap();
    assert_eq!(w.footprint(), after, "wrote after the error");
}

/// One more one-update batch at `handle`'s upper.
async fn append_one(handle: &mut WriteHandle<String, ()>) -> Result<(), PersistError> {
    let lo = *handle.upper().elements().first().unwrap();
    let updates = vec![(("more".to_string(), ()), lo, 1)];
    handle
        .compare_and_append(&updates, f(lo), f(lo + 1))
        .await
        .map(|_| ())
}

/// The shard with some history (see [`prepare`]), its handles abandoned: the head's seqno and
/// bytes.
fn prepared_head(w: &World) -> (SeqNo, Bytes) {
    let (_, a, _, _) = prepare(w, Damage::CorruptHead);
    a.abandon();
    let head = w.head();
    let stored = w
        .consensus
        .scan(SHARD, head, 1)
        .now_or_never()
        .unwrap()
        .unwrap();
    (head, stored[0].data.clone())
}

/// A head version that is checksummed and decodes but is wrong (a writer's upper beyond the
/// shard's upper, a seqno that cannot follow) is an `Inconsistent` permanent error, never a
/// panic in a transition, for a fresh open.
#[test]
fn well_formed_but_wrong_versions_are_inconsistent() {
    use persist_playground::persist::encoding::{decode_diff, encode_diff};
    type Edit = fn(&mut persist_playground::persist::encoding::StateDiff);
    let edits: [(&str, Edit); 3] = [
        ("writer upper beyond the shard upper", |d| {
            d.writers = vec![(
                WriterId("w-forged".into()),
                Some(WriterState {
                    last_heartbeat_ms: 0,
                    lease_duration_ms: 1,
                    most_recent_write_token: IdempotencyToken("i-forged".into()),
                    most_recent_write_upper: Antichain::from_elem(u64::MAX),
                }),
            )];
        }),
        ("a walltime that goes back", |d| d.walltime_ms = 0),
        ("a rollup listed past the version", |d| {
            let (seqno, rollup) = d.latest_rollup.clone().unwrap();
            d.rollups = vec![(SeqNo(seqno.0 + 1_000), Some(rollup))];
        }),
    ];
    for (i, (what, edit)) in edits.into_iter().enumerate() {
        let w = world(500 + i as u64);
        let (head, bytes) = prepared_head(&w);
        let mut diff = decode_diff(&bytes).unwrap();
        edit(&mut diff);
        assert!(w.consensus.tamper(SHARD, head, encode_diff(&diff).into()));
        let fresh = w.client(8);
        let err = w
            .sim
            .block_on(async move { fresh.open_writer::<String, ()>(&shard()).await.map(|_| ()) })
            .unwrap();
        let err = permanent(err, what);
        assert_eq!(
            (err.at.clone(), err.kind),
            (BrokenAt::Version(head), PermanentKind::Inconsistent),
            "{what}: {err}"
        );
    }
}

/// Random damage to the head version, end to end: random bytes, and real versions with bytes
/// flipped and the checksum recomputed (so the payload decoder sees them). A fresh open answers
/// within the deadline, with a permanent error or (when the damage happens to leave a valid
/// version) a handle; it never panics and never retries for ever.
#[test]
fn random_damage_to_the_head_never_panics_or_hangs() {
    use rand_core::{RngCore, SeedableRng};
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0xbad);
    let (mut permanent_errors, mut opened) = (0, 0);
    for i in 0..60u64 {
        let w = world(600 + i);
        let (head, bytes) = prepared_head(&w);
        let mut bytes = bytes.to_vec();
        if i % 3 == 0 {
            let len = (rng.next_u64() % 64) as usize;
            bytes = (0..len).map(|_| rng.next_u64() as u8).collect();
        } else {
            for _ in 0..=(rng.next_u64() % 3) {
                let at = 8 + (rng.next_u64() as usize) % (bytes.len() - 8);
                bytes[at] ^= 1 << (rng.next_u64() % 8);
            }
            let crc = crc32fast::hash(&bytes[8..]);
            bytes[4..8].copy_from_slice(&crc.to_le_bytes());
        }
        assert!(w.consensus.tamper(SHARD, head, bytes.into()));
        let (fresh, rt) = (w.client(9), w.sim.runtime());
        let out = w
            .sim
            .block_on(async move {
                rt.timeout(DEADLINE_MS, fresh.open_writer::<String, ()>(&shard()))
                    .await
                    .map(|r| r.map(|_| ()))
            })
            .unwrap()
            .unwrap_or_else(|_| panic!("damage {i}: timed out"));
        match out {
            Ok(()) => opened += 1,
            Err(PersistError::Permanent(e)) => {
                // The damaged version itself, or the rollup a damaged key in it now names.
                let named = e.at == BrokenAt::Version(head) || matches!(e.at, BrokenAt::BlobKey(_));
                assert!(named, "damage {i}: {e}");
                permanent_errors += 1;
            }
            Err(e) => panic!("damage {i}: {e}"),
        }
    }
    println!("{permanent_errors} permanent errors, {opened} opened anyway");
    assert!(permanent_errors > 40);
}

/// A Consensus that another party can reset (every key gone, as when another tab deletes the
/// IndexedDB database and creates it again): delegates to a store that `reset` replaces.
struct ResettableConsensus(std::cell::RefCell<Rc<MemConsensus>>);

impl ResettableConsensus {
    fn current(&self) -> Rc<MemConsensus> {
        Rc::clone(&self.0.borrow())
    }
    fn reset(&self) {
        *self.0.borrow_mut() = Rc::new(MemConsensus::new());
    }
}

#[async_trait::async_trait(?Send)]
impl Consensus for ResettableConsensus {
    async fn head(
        &self,
        key: &str,
    ) -> Result<
        Option<persist_playground::location::VersionedData>,
        persist_playground::location::ExternalError,
    > {
        self.current().head(key).await
    }
    async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<SeqNo>,
        new: persist_playground::location::VersionedData,
    ) -> Result<persist_playground::location::CaSResult, persist_playground::location::ExternalError>
    {
        self.current().compare_and_set(key, expected, new).await
    }
    async fn scan(
        &self,
        key: &str,
        from: SeqNo,
        limit: usize,
    ) -> Result<
        Vec<persist_playground::location::VersionedData>,
        persist_playground::location::ExternalError,
    > {
        self.current().scan(key, from, limit).await
    }
    async fn truncate(
        &self,
        key: &str,
        seqno: SeqNo,
    ) -> Result<usize, persist_playground::location::ExternalError> {
        self.current().truncate(key, seqno).await
    }
    async fn list_keys(&self) -> Result<Vec<String>, persist_playground::location::ExternalError> {
        self.current().list_keys().await
    }
}

/// The store is reset under a warm writer (its cache knows seqno N; Consensus now holds nothing
/// for the shard). Its next compare_and_append answers a permanent `Inconsistent` error naming
/// seqno N in bounded virtual time, instead of retrying for ever or starting a new chain under
/// stale state; nothing is written into the reset store.
#[test]
fn a_store_reset_under_a_warm_writer_is_a_permanent_error() {
    let sim = Simulator::new(77);
    let consensus = Rc::new(ResettableConsensus(std::cell::RefCell::new(Rc::new(
        MemConsensus::new(),
    ))));
    let location = Location {
        blob: Rc::new(MemBlob::new()),
        consensus: consensus.clone(),
    };
    let cfg = PersistConfig {
        compaction_enabled: false,
        gc_enabled: false,
        rollup_threshold: 0,
        ..PersistConfig::default()
    };
    let client = PersistClient::new(location, sim.runtime(), cfg, 3);
    let rt = sim.runtime();
    let (c2, rt2) = (consensus.clone(), rt.clone());
    let (result, elapsed, known) = sim
        .block_on(async move {
            let mut w = client.open_writer::<String, ()>(&shard()).await.unwrap();
            write(&mut w, 3).await;
            let known = c2.current().head(SHARD).await.unwrap().unwrap().seqno;
            c2.reset();
            let start = rt2.now_ms();
            let r = rt2.timeout(DEADLINE_MS, append_one(&mut w)).await;
            (r, rt2.now_ms() - start, known)
        })
        .unwrap();
    let err = match result {
        Ok(r) => permanent(r, "a write after the reset"),
        Err(_) => panic!("the write after a reset kept retrying for {DEADLINE_MS} ms"),
    };
    assert!(elapsed <= ANSWER_BOUND_MS, "answered after {elapsed} ms");
    assert_eq!(
        (err.at.clone(), err.kind),
        (BrokenAt::Version(known), PermanentKind::Inconsistent),
        "{err}"
    );
    assert!(err.to_string().contains("vanished"), "{err}");
    let keys = consensus
        .current()
        .list_keys()
        .now_or_never()
        .unwrap()
        .unwrap();
    assert!(
        keys.is_empty(),
        "nothing was written after the reset: {keys:?}"
    );
}
