//! The reference model of an upsert collection: what the output shard must hold.
//!
//! At an upper `u`, per key, the message with the highest offset among those at times before
//! `u` decides: a value (or error) is in the output once, a delete means the key is absent.
//! Nothing else may be there: no key twice, no retraction without its value, no resurrection.

use crate::vec_map::VecMap;

use super::error::ContentsDiffer;
use super::source::SourceMessage;
use super::types::{DataflowError, SourceData};
use crate::persist::codec::{Row, Timestamp};

/// The expected contents at `upper`: each row (or error) with diff 1, sorted.
pub fn expected_at(messages: &[SourceMessage], upper: Timestamp) -> Vec<(SourceData, i64)> {
    let mut latest: VecMap<i64, &SourceMessage> = VecMap::new();
    for m in messages.iter().filter(|m| m.ts < upper) {
        match latest.get(&m.key) {
            Some(prev) if prev.offset > m.offset => {}
            _ => {
                latest.insert(m.key, m);
            }
        }
    }
    let mut out: Vec<(SourceData, i64)> = latest
        .values()
        .filter_map(|m| m.value.clone())
        .map(|v| (SourceData(v.map_err(DataflowError::from)), 1))
        .collect();
    crate::sort::sort(&mut out);
    out
}

/// Compares accumulated shard contents (consolidated, diff per row) with the model at `upper`.
/// Returns a description of the first difference.
pub fn check_contents(
    contents: &VecMap<SourceData, i64>,
    messages: &[SourceMessage],
    upper: Timestamp,
) -> Result<(), ContentsDiffer> {
    let actual: Vec<(SourceData, i64)> = contents
        .iter()
        .filter(|(_, d)| **d != 0)
        .map(|(k, d)| (k.clone(), *d))
        .collect();
    let expected = expected_at(messages, upper);
    if actual == expected {
        return Ok(());
    }
    let show = |v: &[(SourceData, i64)]| -> Vec<String> {
        v.iter()
            .map(|(d, r)| match &d.0 {
                Ok(row) => format!("{}x{r}", Row::to_string(row)),
                Err(e) => format!("{e}x{r}"),
            })
            .collect()
    };
    Err(ContentsDiffer {
        upper,
        actual: show(&actual),
        expected: show(&expected),
    })
}

/// What a [`run_checker`] found so far. As data: camelCase fields, the upper a number or null
/// (see [`crate::numbers`]); the library names it `CheckerReportView`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    all(feature = "library", target_arch = "wasm32"),
    derive(tsify::Tsify),
    tsify(missing_as_null, rename = "CheckerReportView")
)]
pub struct CheckerReport {
    /// Shard uppers at which the contents were compared with the model.
    pub checks: u64,
    /// The last upper checked.
    #[serde(serialize_with = "crate::numbers::opt_time")]
    pub upper: Option<Timestamp>,
    /// Every difference found (empty: the shard always matched).
    pub violations: Vec<String>,
    /// Whether its reader is registered (holding the since).
    pub registered: bool,
}

/// Follows the shard from time 0 (its reader holds the since there until it has read), and at
/// every upper it reaches compares the accumulated contents with [`expected_at`] over `source`.
/// Runs until `done` is set or the shard is finished.
pub async fn run_checker(
    client: crate::persist::PersistClient,
    shard: crate::persist::ShardId,
    source: std::rc::Rc<std::cell::RefCell<super::source::SourceLog>>,
    report: std::rc::Rc<std::cell::RefCell<CheckerReport>>,
) {
    use crate::persist::read::ListenEvent;
    use timely::progress::Antichain;
    let fail = |e: String| report.borrow_mut().violations.push(e);
    let read = match client.open_leased_reader::<SourceData, ()>(&shard).await {
        Ok(r) => r,
        Err(e) => return fail(format!("checker: {e}")),
    };
    report.borrow_mut().registered = true;
    let mut contents: VecMap<SourceData, i64> = VecMap::new();
    let check = |contents: &mut VecMap<SourceData, i64>, upper: Timestamp| {
        contents.retain(|_, d| *d != 0);
        let mut r = report.borrow_mut();
        r.checks += 1;
        r.upper = Some(upper);
        if let Some((k, d)) = contents.iter().find(|(_, d)| **d != 1) {
            r.violations
                .push(format!("at upper {upper}: {k:?} has diff {d}"));
        }
        if let Err(e) = check_contents(contents, source.borrow().messages(), upper) {
            r.violations.push(e.to_string());
        }
    };
    let (snapshot, mut listen) = match read.subscribe(Antichain::from_elem(0)).await {
        Ok(s) => s,
        Err(e) => return fail(format!("checker: {e}")),
    };
    for ((d, ()), _, r) in snapshot {
        *contents.get_or_insert_with(d, || 0) += r;
    }
    check(&mut contents, 1);
    loop {
        let events = match listen.next().await {
            Ok(e) => e,
            Err(e) => return fail(format!("checker: {e}")),
        };
        for event in events {
            match event {
                ListenEvent::Updates(updates) => {
                    for ((d, ()), _, r) in updates {
                        *contents.get_or_insert_with(d, || 0) += r;
                    }
                }
                ListenEvent::Progress(p) => match p.elements().first() {
                    Some(&u) => check(&mut contents, u),
                    None => return,
                },
            }
        }
    }
}
