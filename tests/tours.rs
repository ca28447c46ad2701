//! The guided tours (`www/tours/*.json`) replayed natively, so a tour cannot rot when a command or
//! a component changes: every scripted command must parse as a [`Command`] and apply, every
//! `snap` check of every step's `expect` must hold on the snapshot the step ends with, every
//! highlighted panel must exist in `index.html` and every highlighted actor in the snapshot.
//!
//! It also pins what the page relies on to rebuild a step from its URL: a step's state does not
//! depend on how its run is cut into chunks, nor on how often the page pulls snapshots between
//! them (the page pulls every frame; a rebuild pulls after every chunk).
//!
//! The checks are evaluated by a port of `valueAt`/`evalSnapCheck` in `www/tours/engine.js`
//! (paths like `shards[name=data].upper`, ops `== != > >= < <= contains exists null`).

#![cfg(not(target_arch = "wasm32"))]

use std::path::PathBuf;

use persist_playground::playground::table::default_actors;
use persist_playground::playground::{Command, Scenario};
use serde_json::Value;

/// `CHUNK_MS` in www/tours/engine.js.
const CHUNK_MS: u64 = 50;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tours() -> Vec<Value> {
    let dir = root().join("www/tours");
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("index.json")).unwrap()).unwrap();
    let ids = index["tours"].as_array().expect("index.json lists tours");
    assert!(ids.len() >= 6, "the six ordinary tours are listed");
    ids.iter()
        .map(|id| {
            let id = id.as_str().unwrap();
            let text = std::fs::read_to_string(dir.join(format!("{id}.json")))
                .unwrap_or_else(|e| panic!("www/tours/{id}.json: {e}"));
            let tour: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{id}.json: {e}"));
            assert_eq!(tour["id"], id, "{id}.json names itself");
            tour
        })
        .collect()
}

fn seed(tour: &Value) -> u64 {
    tour["seed"].as_u64().expect("a whole-number seed")
}

fn steps(tour: &Value) -> &Vec<Value> {
    tour["steps"].as_array().expect("steps")
}

/// Applies step `i`'s commands; panics naming the tour, step and command on a refusal.
fn apply_commands(s: &mut Scenario, tour: &Value, i: usize) {
    let step = &steps(tour)[i];
    for (j, c) in step["commands"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .enumerate()
    {
        let at = format!("tour {} step {} command {}", tour["id"], i + 1, j + 1);
        let command: Command = serde_json::from_value(c.clone())
            .unwrap_or_else(|e| panic!("{at} is not a Command ({e}): {c}"));
        command
            .validate()
            .unwrap_or_else(|e| panic!("{at} is invalid: {e}"));
        s.apply(command)
            .unwrap_or_else(|e| panic!("{at} was refused: {e}"));
    }
}

fn run_ms(step: &Value) -> u64 {
    step["runMs"].as_u64().unwrap_or(0)
}

/// A step's run in pieces of `chunk` ms, as `chunksOf` in www/tours/engine.js cuts it: a step
/// of no time is one run of 0 ms (what its commands started, a check say, runs at that instant).
fn chunks(run_ms: u64, chunk: u64) -> Vec<u64> {
    if run_ms == 0 {
        return vec![0];
    }
    let mut out = Vec::new();
    let mut left = run_ms;
    while left > 0 {
        out.push(left.min(chunk));
        left -= left.min(chunk);
    }
    out
}

/// One path segment: `name`, `name[N]` (negative from the end), `name[k=v]`, or a final `length`.
fn segment(v: &Value, seg: &str) -> Option<Value> {
    let (name, pick) = match seg.find('[') {
        Some(i) => (
            &seg[..i],
            Some(seg[i + 1..].strip_suffix(']').expect("a closing ]")),
        ),
        None => (seg, None),
    };
    if name == "length" && pick.is_none() {
        if let Some(a) = v.as_array() {
            return Some(Value::from(a.len()));
        }
        if let Some(s) = v.as_str() {
            return Some(Value::from(s.chars().count()));
        }
    }
    let inner = if name.is_empty() { v } else { v.get(name)? };
    let Some(pick) = pick else {
        return Some(inner.clone());
    };
    let arr = inner.as_array()?;
    if let Ok(n) = pick.parse::<i64>() {
        let idx = if n < 0 { arr.len() as i64 + n } else { n };
        return arr.get(usize::try_from(idx).ok()?).cloned();
    }
    let (k, want) = pick.split_once('=').expect("k=v");
    arr.iter()
        .find(|e| {
            e.get(k).is_some_and(|f| match f {
                Value::String(s) => s == want,
                // A number, bool or null matches its JSON text ("5" picks 5), as in engine.js.
                #[allow(clippy::cmp_owned)]
                other => other.to_string() == want,
            })
        })
        .cloned()
}

fn value_at(snap: &Value, path: &str) -> Option<Value> {
    path.split('.')
        .try_fold(snap.clone(), |v, seg| segment(&v, seg))
}

fn compare(op: &str, a: &Option<Value>, b: &Option<Value>) -> bool {
    let num = |v: &Option<Value>| v.as_ref().and_then(Value::as_f64);
    match op {
        "==" => a.is_some() && a == b,
        "!=" => a != b,
        ">" | ">=" | "<" | "<=" => match (num(a), num(b)) {
            (Some(x), Some(y)) => match op {
                ">" => x > y,
                ">=" => x >= y,
                "<" => x < y,
                _ => x <= y,
            },
            _ => false,
        },
        "contains" => match (a, b) {
            (Some(Value::String(s)), Some(Value::String(t))) => s.contains(t.as_str()),
            (Some(Value::Array(xs)), Some(y)) => xs.contains(y),
            _ => false,
        },
        "exists" => a.as_ref().is_some_and(|v| !v.is_null()),
        "null" => a.as_ref().is_some_and(Value::is_null),
        other => panic!("unknown op {other}"),
    }
}

/// Every failed `snap` check of `step`, as text.
fn failed(step: &Value, snap: &Value, prev: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    for e in step["expect"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let Some(path) = e["snap"].as_str() else {
            assert!(
                e["panel"].as_str().is_some_and(|p| p.starts_with("panel-"))
                    && e["text"].is_string(),
                "an expect is a snap check or a panel check: {e}"
            );
            continue;
        };
        let op = e["op"].as_str().expect("an op");
        let got = value_at(snap, path);
        let want = if let Some(r) = e["ref"].as_str() {
            value_at(snap, r)
        } else if let Some(p) = e["prev"].as_str() {
            value_at(prev.expect("a prev check needs a previous step"), p)
        } else {
            e.get("value").cloned()
        };
        if !compare(op, &got, &want) {
            out.push(format!("{path} = {got:?} {op} {want:?}"));
        }
    }
    out
}

fn snapshot_json(s: &mut Scenario) -> Value {
    serde_json::to_value(s.snapshot()).expect("a snapshot is plain data")
}

#[test]
fn every_tour_replays_and_every_step_shows_what_it_says() {
    let html = std::fs::read_to_string(root().join("index.html")).unwrap();
    for tour in tours() {
        let id = tour["id"].as_str().unwrap().to_string();
        assert!(tour["title"].as_str().is_some_and(|t| !t.is_empty()));
        let hidden = hidden_panels(&tour, &html);
        let mut s = Scenario::seeded(seed(&tour));
        let mut prev: Option<Value> = None;
        for (i, step) in steps(&tour).iter().enumerate() {
            let at = format!("tour {id} step {}", i + 1);
            assert!(
                step["title"].as_str().is_some_and(|t| !t.is_empty()),
                "{at}: a title"
            );
            let narration = step["narration"].as_array().expect("narration");
            assert!(
                !narration.is_empty()
                    && narration
                        .iter()
                        .all(|p| p.as_str().is_some_and(|p| p.len() > 20)),
                "{at}: narration paragraphs"
            );
            assert!(
                !step["expect"].as_array().map(Vec::is_empty).unwrap_or(true),
                "{at}: says what the panels must show"
            );
            if step["reset"] == true {
                s = Scenario::seeded(seed(&tour));
            }
            apply_commands(&mut s, &tour, i);
            for ms in chunks(run_ms(step), CHUNK_MS) {
                s.run_for(ms).unwrap();
            }
            let snap = snapshot_json(&mut s);
            for p in narration {
                for quoted in p.as_str().unwrap().split("{{").skip(1) {
                    let path = quoted.split("}}").next().unwrap().trim();
                    let (from, path) = match path.strip_prefix("prev:") {
                        Some(rest) => (
                            prev.as_ref().expect("{{prev:}} needs a previous step"),
                            rest,
                        ),
                        None => (&snap, path),
                    };
                    assert!(
                        value_at(from, path).is_some_and(|v| !v.is_object() && !v.is_array()),
                        "{at}: the narration quotes {path}, which is not a value here"
                    );
                }
            }
            for e in step["expect"].as_array().unwrap() {
                if let Some(panel) = e["panel"].as_str() {
                    assert!(
                        html.contains(&format!("id=\"{panel}\"")),
                        "{at}: no {panel} in index.html"
                    );
                }
            }
            let fails = failed(step, &snap, prev.as_ref());
            assert!(fails.is_empty(), "{at} ({}): {fails:?}", step["title"]);
            for h in step["highlight"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                let h = h.as_str().unwrap();
                assert!(
                    !hidden.contains(&h),
                    "{at}: it names {h}, which the tour hides"
                );
                if let Some(panel) = h.strip_prefix("panel-") {
                    assert!(
                        html.contains(&format!("id=\"panel-{panel}\"")),
                        "{at}: no panel {h} in index.html"
                    );
                } else if let Some(shard) = h.strip_prefix("shard:") {
                    assert!(
                        value_at(&snap, &format!("shards[name={shard}]")).is_some(),
                        "{at}: no shard {shard}"
                    );
                } else {
                    assert!(
                        value_at(&snap, &format!("actors[id={h}]")).is_some(),
                        "{at}: no actor {h}"
                    );
                }
            }
            // The shard the Shard panel shows here (engine.js `shardOf`) must exist.
            if let Some(shard) = step["shard"].as_str().or(tour["shard"].as_str()) {
                assert!(
                    value_at(&snap, &format!("shards[name={shard}]")).is_some(),
                    "{at}: the Shard panel is to show {shard}, which is no shard here"
                );
            }
            prev = Some(snap);
        }
    }
}

/// A tour's `hide`: panels of index.html it never uses (hidden while it is open).
fn hidden_panels<'a>(tour: &'a Value, html: &str) -> Vec<&'a str> {
    let list: Vec<&str> = (tour["hide"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter())
    .map(|h| h.as_str().expect("hide lists panel ids"))
    .collect();
    for h in &list {
        assert!(
            h.starts_with("panel-") && html.contains(&format!("id=\"{h}\"")),
            "tour {}: hides {h}, which is no panel in index.html",
            tour["id"]
        );
    }
    list
}

/// Digest at the end of every step, running each step's time in `chunk` ms pieces and taking a
/// snapshot after each piece if `pull`.
fn digests(tour: &Value, chunk: u64, pull: bool) -> Vec<String> {
    let mut s = Scenario::seeded(seed(tour));
    let mut out = Vec::new();
    for (i, step) in steps(tour).iter().enumerate() {
        if step["reset"] == true {
            s = Scenario::seeded(seed(tour));
        }
        apply_commands(&mut s, tour, i);
        if pull {
            s.snapshot();
            let _ = s.events_after(0, 10);
        }
        for ms in chunks(run_ms(step), chunk) {
            s.run_for(ms).unwrap();
            if pull {
                s.snapshot();
            }
        }
        out.push(s.snapshot().digest());
    }
    out
}

#[test]
fn a_step_is_reached_the_same_however_its_run_is_cut_and_pulled() {
    for tour in tours() {
        let rebuild = digests(&tour, CHUNK_MS, true);
        assert_eq!(
            rebuild,
            digests(&tour, CHUNK_MS, false),
            "tour {}: pulls change nothing",
            tour["id"]
        );
        assert_eq!(
            rebuild,
            digests(&tour, 17, false),
            "tour {}: the chunk size changes nothing",
            tour["id"]
        );
        assert_eq!(
            rebuild,
            digests(&tour, 60_000, true),
            "tour {}: one run per step is the same",
            tour["id"]
        );
        // A step with no command and no run only moves the learner's focus to another panel:
        // the state stays. Every other step changes it.
        for (i, pair) in rebuild.windows(2).enumerate() {
            let step = &steps(&tour)[i + 1];
            let focus_only = step["reset"] != true
                && step["commands"].as_array().is_none_or(Vec::is_empty)
                && run_ms(step) == 0;
            assert_eq!(
                pair[0] == pair[1],
                focus_only,
                "tour {} step {}: {}",
                tour["id"],
                i + 2,
                if focus_only {
                    "a step with no command and no run keeps the state"
                } else {
                    "the step changes the state"
                }
            );
        }
    }
}

#[test]
fn the_path_evaluator_picks_fields_elements_and_lengths() {
    let v: Value = serde_json::json!({
        "shards": [{ "name": "data", "upper": 5, "batches": [1, 2, 3] }, { "name": "x", "upper": null }],
        "actors": [{ "id": "W1", "detail": { "committed": 2 } }],
        "n": 7,
    });
    assert_eq!(
        value_at(&v, "shards[name=data].upper"),
        Some(Value::from(5))
    );
    assert_eq!(
        value_at(&v, "shards[name=data].batches.length"),
        Some(Value::from(3))
    );
    assert_eq!(value_at(&v, "shards[-1].name"), Some(Value::from("x")));
    assert_eq!(value_at(&v, "shards[name=nope].upper"), None);
    assert!(compare(
        "null",
        &value_at(&v, "shards[name=x].upper"),
        &None
    ));
    assert!(!compare(
        "exists",
        &value_at(&v, "shards[name=x].upper"),
        &None
    ));
    assert!(compare(">", &value_at(&v, "n"), &Some(Value::from(6))));
    assert!(!compare(
        ">",
        &value_at(&v, "missing"),
        &Some(Value::from(6))
    ));
    assert!(!compare("==", &None, &None), "a missing value never equals");
    let step = serde_json::json!({ "expect": [
        { "snap": "actors[id=W1].detail.committed", "op": ">=", "value": 2 },
        { "snap": "n", "op": ">", "prev": "n" },
        { "panel": "panel-shard", "text": "upper" }
    ]});
    let prev = serde_json::json!({ "n": 9 });
    assert_eq!(
        failed(&step, &v, Some(&prev)),
        vec!["n = Some(Number(7)) > Some(Number(9))".to_string()]
    );
}

/// The page's default scenario (`table::default_actors`, the page's `defaultActors`, with the
/// generator on), sent as the page sends it, in JSON: busy enough that several processes
/// compact and GC at once.
fn busy_scenario(pull_every_ms: Option<u64>) -> String {
    let mut s = Scenario::seeded(1);
    for spec in default_actors() {
        let c =
            serde_json::json!({ "type": "addActor", "spec": serde_json::to_value(spec).unwrap() });
        s.apply(serde_json::from_value(c).unwrap()).unwrap();
    }
    s.apply(Command::SetGenerator { on: true }).unwrap();
    let chunk = pull_every_ms.unwrap_or(12_000);
    let mut t = 0;
    while t < 12_000 {
        s.run_for(chunk).unwrap();
        t += chunk;
        if pull_every_ms.is_some() {
            s.snapshot();
        }
    }
    s.snapshot().digest()
}

#[test]
fn how_often_the_page_pulls_never_changes_the_state() {
    let quiet = busy_scenario(None);
    assert_eq!(busy_scenario(Some(16)), quiet, "pulled every 16 ms");
    assert_eq!(busy_scenario(Some(250)), quiet, "pulled every 250 ms");
}

/// The terms a learner needs defined, each where the tours first use it. A tour defines a term
/// where it puts it in bold (`**stash**: ...`), so the first narration to use a term (in the
/// tours' order, `index.json`, step by step) must have it in bold there: a term used before it is
/// defined sends the learner hunting.
const DEFINED_WHERE_FIRST_USED: &[&str] = &[
    "input frontier",
    "persist upper",
    "stash",
    "partial emission",
    "provisional",
    "rehydrate",
    "diff_sum",
    "undecodable on purpose",
    "durable upper",
    "fenced",
    "upper tick",
    "compaction",
    "garbage collection",
];

/// Where `term` first occurs in `text` as a word (case-insensitive), and whether it is inside a
/// `**bold**` span there.
fn first_use(text: &str, term: &str) -> Option<bool> {
    let lower = text.to_lowercase();
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let at = lower.match_indices(term).map(|(i, _)| i).find(|&i| {
        // The term, or its plural ("rehydrates").
        let after = &lower[i + term.len()..];
        let after = after.strip_prefix('s').unwrap_or(after);
        !is_word(lower[..i].chars().next_back()) && !is_word(after.chars().next())
    })?;
    // Inside bold: an odd number of `**` before it.
    Some(lower[..at].matches("**").count() % 2 == 1)
}

#[test]
fn every_term_is_defined_where_the_tours_first_use_it() {
    for term in DEFINED_WHERE_FIRST_USED {
        let first = tours().into_iter().find_map(|tour| {
            steps(&tour).iter().enumerate().find_map(|(i, step)| {
                step["narration"].as_array()?.iter().find_map(|p| {
                    let bold = first_use(p.as_str()?, term)?;
                    Some((format!("tour {} step {}", tour["id"], i + 1), bold))
                })
            })
        });
        let (at, bold) = first.unwrap_or_else(|| panic!("no tour uses {term:?}"));
        assert!(
            bold,
            "{at} is the first to use {term:?}, and does not define it (in **bold**)"
        );
    }
}

#[test]
fn a_term_counts_as_used_as_a_word_and_as_defined_in_bold() {
    assert_eq!(first_use("the **stash** holds it", "stash"), Some(true));
    assert_eq!(first_use("it waits in the stash", "stash"), Some(false));
    assert_eq!(
        first_use("it **rehydrates** from the shard", "rehydrate"),
        Some(true)
    );
    assert_eq!(first_use("stashed values", "stash"), None);
    assert_eq!(first_use("nothing here", "stash"), None);
}

/// The panels of index.html: `(id, title)`, the title as its `<h2>` shows it.
fn panel_titles(html: &str) -> Vec<(String, String)> {
    html.split("<section class=\"panel")
        .skip(1)
        .filter_map(|s| {
            let id = s.split("id=\"").nth(1)?.split('"').next()?;
            let title = s.split("<h2>").nth(1)?.split('<').next()?;
            Some((
                id.to_string(),
                title.replace("&amp;", "&").trim().to_string(),
            ))
        })
        .collect()
}

/// What narration may call panel `title`: "<title> panel" (the title before an " & " will do:
/// "Processes panel"); a title that is a noun of its own ("Consensus log", "Event log") by
/// itself; the Writers panel's table as the "Writers table".
fn names_of(title: &str) -> Vec<String> {
    let short = title.split(" & ").next().unwrap_or(title);
    let mut names = vec![format!("{title} panel"), format!("{short} panel")];
    if title.ends_with(" log") {
        names.push(title.to_string());
    }
    if title == "Writers" {
        names.push("Writers table".into());
    }
    names
}

/// The panels `text` names (ids), and every "<Capitalised> panel" in it that names no panel.
fn panels_named(text: &str, panels: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let lower = text.to_lowercase();
    let mut named = Vec::new();
    for (id, title) in panels {
        let said = names_of(title).iter().any(|n| {
            lower.match_indices(&n.to_lowercase()).any(|(i, _)| {
                let before = lower[..i].chars().next_back();
                let after = lower[i + n.len()..].chars().next();
                !before.is_some_and(char::is_alphanumeric)
                    && !after.is_some_and(char::is_alphanumeric)
            })
        });
        if said {
            named.push(id.clone());
        }
    }
    let known: Vec<String> = panels
        .iter()
        .flat_map(|(_, t)| names_of(t))
        .map(|n| n.to_lowercase())
        .collect();
    let words: Vec<&str> = text.split_whitespace().collect();
    let unknown = words
        .windows(2)
        .filter(|w| w[1].trim_end_matches(|c: char| !c.is_alphanumeric()) == "panel")
        .filter_map(|w| {
            let name = w[0].trim_start_matches(|c: char| !c.is_alphanumeric());
            if !name.starts_with(|c: char| c.is_uppercase()) || name == "The" {
                return None;
            }
            let at = words.iter().position(|x| std::ptr::eq(*x, w[0]))?;
            let one = format!("{name} panel").to_lowercase();
            let two = (at > 0).then(|| format!("{} {name} panel", words[at - 1]).to_lowercase());
            let ok = known.contains(&one) || two.is_some_and(|t| known.contains(&t));
            (!ok).then(|| format!("{name} panel"))
        })
        .collect();
    (named, unknown)
}

/// A panel the narration names is called by its title (rule-upsert-feedback said "the Upsert
/// panel" of the panel titled "Upsert pipeline"), and is one the step highlights (so the page
/// shows it: tests/e2e/tour-walk.test.mjs checks that it is on screen at settle).
#[test]
fn every_panel_a_step_names_is_called_by_its_title_and_highlighted() {
    let html = std::fs::read_to_string(root().join("index.html")).unwrap();
    let panels = panel_titles(&html);
    assert!(panels.len() >= 9, "the panels of index.html: {panels:?}");
    for tour in tours() {
        for (i, step) in steps(&tour).iter().enumerate() {
            let at = format!("tour {} step {}", tour["id"], i + 1);
            let text: Vec<&str> = step["narration"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let (named, unknown) = panels_named(&text.join(" "), &panels);
            assert!(
                unknown.is_empty(),
                "{at}: names {unknown:?}, no panel's title"
            );
            let highlight: Vec<&str> = step["highlight"]
                .as_array()
                .map(|h| h.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for id in named {
                let shown = highlight.contains(&id.as_str())
                    || (id == "panel-shard" && highlight.iter().any(|h| h.starts_with("shard:")));
                assert!(shown, "{at}: names {id} and does not highlight it");
            }
        }
    }
}

#[test]
fn a_panel_is_named_by_its_title() {
    let panels = vec![
        ("panel-upsert".to_string(), "Upsert pipeline".to_string()),
        (
            "panel-processes".to_string(),
            "Processes & actors".to_string(),
        ),
        ("panel-log".to_string(), "Event log".to_string()),
    ];
    let (named, unknown) = panels_named("The Upsert panel and the Event log.", &panels);
    assert_eq!(
        (named, unknown),
        (
            vec!["panel-log".to_string()],
            vec!["Upsert panel".to_string()]
        )
    );
    let (named, unknown) = panels_named(
        "In the Upsert pipeline panel; the Processes panel; so the panel",
        &panels,
    );
    assert_eq!(
        named,
        vec!["panel-upsert".to_string(), "panel-processes".to_string()]
    );
    assert!(unknown.is_empty(), "{unknown:?}");
}
