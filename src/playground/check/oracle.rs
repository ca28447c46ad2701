//! The oracle part of the check, per timeline: `oracle-regress`, `oracle-duplicate` and
//! `oracle-bound`.
//!
//! Instances of one timeline fence each other by epoch, and a later epoch starts above every
//! timestamp an earlier one could hand out. So every write timestamp of epoch `e` must be above
//! every write timestamp of every epoch before `e` (and below every one of a later epoch), and
//! above the earlier ones of its own epoch. The most recent [`RECENT_KEPT`] timestamps are kept
//! exactly, to tell a timestamp handed out twice from one merely going back; only the last
//! [`EPOCHS_KEPT`] epochs' ranges are kept.

use std::collections::VecDeque;

use super::{At, CheckRule, Findings, VecMap};
use crate::playground::fact::Fact;

/// Write timestamps kept exactly, per timeline.
pub const RECENT_KEPT: usize = 4_096;
/// Epochs whose ranges are kept, per timeline.
pub const EPOCHS_KEPT: usize = 16;

#[derive(Debug, Clone, Copy, Default)]
struct Epoch {
    min_ts: Option<u64>,
    max_ts: Option<u64>,
    max_at: At,
    read_ts: u64,
    durable_upper: Option<u64>,
}

/// What the check knows of one timeline.
#[derive(Debug, Default)]
pub(crate) struct TimelineTrack {
    epochs: VecMap<u64, Epoch>,
    /// Recent write timestamps: (timestamp, epoch, event), oldest first.
    recent: VecDeque<(u64, u64, At)>,
    stored: Option<(u64, u64, At)>,
}

impl TimelineTrack {
    fn epoch(&mut self, epoch: u64) -> &mut Epoch {
        if !self.epochs.contains_key(&epoch) && self.epochs.len() == EPOCHS_KEPT {
            self.epochs.pop_first();
        }
        self.epochs.get_or_insert_with(epoch, Epoch::default)
    }

    pub(crate) fn fact(&mut self, actor: &str, fact: &Fact, at: At, f: &mut Findings) {
        match fact {
            Fact::TimelineVersion {
                timeline,
                seqno,
                epoch,
                durable_upper,
            } => {
                if let Some((e, d, prev)) = self.stored {
                    f.expect(CheckRule::OracleRegress, *epoch >= e && *durable_upper >= d, &[prev, at], || {
                        format!("oracle {timeline}: the stored record went back from epoch {e}, durable upper {d} to epoch {epoch}, durable upper {durable_upper} (version {seqno})")
                    });
                }
                self.stored = Some((*epoch, *durable_upper, at));
            }
            Fact::OracleOpened {
                timeline,
                epoch,
                start_ts,
                durable_upper,
            } => {
                let earlier = self
                    .epochs
                    .iter()
                    .filter(|(e, _)| **e < *epoch)
                    .filter_map(|(e, r)| r.max_ts.map(|m| (*e, m, r.max_at)))
                    .max_by_key(|(_, m, _)| *m);
                if let Some((e, m, m_at)) = earlier {
                    f.expect(CheckRule::OracleRegress, *start_ts > m, &[m_at, at], || {
                        format!("oracle {timeline}: {actor}'s epoch {epoch} starts at {start_ts}, not above {m}, which epoch {e} handed out")
                    });
                }
                let ep = self.epoch(*epoch);
                ep.durable_upper = Some(*durable_upper);
            }
            Fact::OracleWindow {
                timeline,
                epoch,
                durable_upper,
                ..
            } => {
                let ep = self.epoch(*epoch);
                let prev = ep.durable_upper;
                ep.durable_upper = Some(prev.unwrap_or(0).max(*durable_upper));
                f.expect(
                    CheckRule::OracleRegress,
                    prev.is_none_or(|p| *durable_upper >= p),
                    &[at],
                    || format!("oracle {timeline}: epoch {epoch}'s durable upper went back from {} to {durable_upper}", prev.unwrap_or(0)),
                );
            }
            Fact::OracleTs {
                timeline,
                epoch,
                write_ts,
                read_ts,
            } => self.timestamp(actor, timeline, *epoch, *write_ts, *read_ts, at, f),
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn timestamp(
        &mut self,
        actor: &str,
        timeline: &str,
        epoch: u64,
        w: u64,
        r: u64,
        at: At,
        f: &mut Findings,
    ) {
        // Handed out twice?
        let twice = self
            .recent
            .iter()
            .find(|(t, ..)| *t == w)
            .map(|&(_, e, at)| (e, at));
        f.expect(CheckRule::OracleDuplicate, twice.is_none(), &[twice.map_or(at, |t| t.1), at], || {
            let (e, _) = twice.unwrap_or_default();
            format!("oracle {timeline}: write timestamp {w} was handed out twice (epoch {e}, then {actor}'s epoch {epoch})")
        });
        // Going back: below the top of its own or an earlier epoch, or above the start of a later one.
        let below = self
            .epochs
            .iter()
            .filter(|(e, _)| **e <= epoch)
            .filter_map(|(e, r)| r.max_ts.map(|m| (*e, m, r.max_at)))
            .max_by_key(|(_, m, _)| *m)
            .filter(|(_, m, _)| w <= *m && twice.is_none());
        let above = self
            .epochs
            .iter()
            .filter(|(e, _)| **e > epoch)
            .filter_map(|(e, r)| r.min_ts.map(|m| (*e, m)))
            .min_by_key(|(_, m)| *m)
            .filter(|(_, m)| w >= *m);
        let cited = [below.map_or(at, |b| b.2), at];
        f.expect(CheckRule::OracleRegress, below.is_none() && above.is_none(), &cited, || match (below, above) {
            (Some((e, m, _)), _) => format!("oracle {timeline}: {actor} (epoch {epoch}) handed out {w}, not above {m}, which epoch {e} had already handed out"),
            (_, Some((e, m))) => format!("oracle {timeline}: {actor} (epoch {epoch}) handed out {w} after epoch {e} had started at {m}"),
            _ => String::new(),
        });
        let ep = self.epoch(epoch);
        let (last_read, bound) = (ep.read_ts, ep.durable_upper);
        f.expect(
            CheckRule::OracleRegress,
            r >= w && r >= last_read,
            &[at],
            || {
                format!(
                    "oracle {timeline}: {actor}'s read timestamp {r} is below {}",
                    if r < w {
                        format!("the write {w} it applied")
                    } else {
                        format!("its earlier read timestamp {last_read}")
                    }
                )
            },
        );
        match bound {
            Some(b) => f.expect(CheckRule::OracleBound, w < b, &[at], || {
                format!("oracle {timeline}: {actor} (epoch {epoch}) handed out {w}, not below its durable upper {b}: a restart could hand it out again")
            }),
            None => f.unverified(CheckRule::OracleBound),
        }
        ep.read_ts = ep.read_ts.max(r);
        ep.min_ts = Some(ep.min_ts.map_or(w, |m| m.min(w)));
        if ep.max_ts.is_none_or(|m| w >= m) {
            ep.max_ts = Some(w);
            ep.max_at = at;
        }
        self.recent.push_back((w, epoch, at));
        if self.recent.len() > RECENT_KEPT {
            self.recent.pop_front();
        }
    }
}
