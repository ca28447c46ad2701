//! Rebuilding a seed-mode run: a [`Replay`] applies stamped commands to a fresh scenario of the
//! same seed, each at its stamp, and stops at a target point. It advances in slices of simulator
//! steps, so the page can spread a long rebuild over animation frames and show its progress.
//!
//! A seed-mode run is a function of `(seed, stamped commands)`: the scenario a replay reaches at
//! a point is the one the original run had there, with the same snapshot and the same digest.
//! That is what the page rests on to
//! - scrub to a point older than the snapshots it keeps;
//! - fork: replay the commands up to a point of the past, then go on with new commands (the
//!   original future is discarded);
//! - open a share link or an imported run.
//!
//! Everything is checked before anything runs, so bad input is an error and never a panic:
//! every command's fields, stamps that never go back, and a target that is not before the last
//! command. While it runs, a command the scenario refuses, or a stamp the run cannot reach
//! exactly (it was not recorded by this engine), stops the replay with a message naming the
//! command.

use super::command::{CommandError, Stamp, Stamped};
use super::Scenario;

/// The most commands one replay takes.
pub const MAX_REPLAY_COMMANDS: usize = 100_000;

/// A replay under way. See the module docs.
pub struct Replay {
    scenario: Scenario,
    commands: Vec<Stamped>,
    /// The next command to apply.
    next: usize,
    target: Stamp,
    /// Whether the target's time must be reached exactly (a recorded point), or only its step
    /// (a point between recorded ones: wherever virtual time is after that many steps).
    exact_time: bool,
}

fn refuse<T>(msg: String) -> Result<T, CommandError> {
    Err(CommandError(msg))
}

fn before(a: Stamp, b: Stamp) -> bool {
    a.step < b.step || a.at_ms < b.at_ms
}

impl Replay {
    /// A replay of `commands` on a fresh scenario of `seed`, to stop at `target`.
    pub fn new(seed: u64, commands: Vec<Stamped>, target: Stamp) -> Result<Replay, CommandError> {
        Replay::build(seed, commands, target, true)
    }

    /// A replay of `commands` that stops after `step` simulator steps, at whatever virtual time
    /// that is (every command must be stamped at or before `step`). It is the original's state
    /// there; only where the original paused at exactly that step may its clock read later (a
    /// pause lets time run on without a step: the next step is then a timer, which both reach).
    pub fn to_step(seed: u64, commands: Vec<Stamped>, step: u64) -> Result<Replay, CommandError> {
        let at_ms = commands.last().map_or(0, |c| c.stamp.at_ms);
        Replay::build(seed, commands, Stamp { step, at_ms }, false)
    }

    fn build(
        seed: u64,
        commands: Vec<Stamped>,
        target: Stamp,
        exact_time: bool,
    ) -> Result<Replay, CommandError> {
        if commands.len() > MAX_REPLAY_COMMANDS {
            return refuse(format!(
                "a replay takes at most {MAX_REPLAY_COMMANDS} commands, not {}",
                commands.len()
            ));
        }
        let mut last = Stamp { step: 0, at_ms: 0 };
        for (i, c) in commands.iter().enumerate() {
            let n = i + 1;
            c.command
                .validate()
                .map_err(|e| CommandError(format!("command {n}: {e}")))?;
            if before(c.stamp, last) {
                return refuse(format!(
                    "command {n} is stamped at step {} ({} ms), before the command ahead of it \
                     (step {}, {} ms): stamps never go back",
                    c.stamp.step, c.stamp.at_ms, last.step, last.at_ms
                ));
            }
            last = c.stamp;
        }
        if before(target, last) {
            return refuse(format!(
                "the replay would stop at step {} ({} ms), before its last command (step {}, {} ms)",
                target.step, target.at_ms, last.step, last.at_ms
            ));
        }
        Ok(Replay {
            scenario: Scenario::seeded(seed),
            commands,
            next: 0,
            target,
            exact_time,
        })
    }

    /// Takes at most `budget` simulator steps toward the target, applying each command when its
    /// stamp is reached. Returns whether the target is reached (then [`Replay::finish`]).
    pub fn advance(&mut self, budget: u64) -> Result<bool, CommandError> {
        let mut left = budget;
        loop {
            let goal = self
                .commands
                .get(self.next)
                .map_or(self.target, |c| c.stamp);
            let taken = self.scenario.steps();
            let n = goal.step.saturating_sub(taken).min(left);
            self.scenario.step(n)?;
            left -= n;
            if self.scenario.steps() < goal.step {
                return Ok(false);
            }
            if self.next == self.commands.len() && !self.exact_time {
                return Ok(true);
            }
            let which = match self.next {
                i if i < self.commands.len() => format!("command {}", i + 1),
                _ => "the end of the run".to_string(),
            };
            self.scenario
                .advance_to(goal)
                .map_err(|e| CommandError(format!("the replay stopped before {which}: {e}")))?;
            let (steps, now) = (self.scenario.steps(), self.scenario.now_ms());
            if steps != goal.step || now != goal.at_ms {
                return refuse(format!(
                    "the replay diverged before {which}: it is stamped at step {} ({} ms) but the \
                     run reached step {steps} ({now} ms) (was it recorded by another version?)",
                    goal.step, goal.at_ms
                ));
            }
            let Some(c) = self.commands.get(self.next) else {
                return Ok(true);
            };
            self.scenario
                .apply(c.command.clone())
                .map_err(|e| CommandError(format!("{which} was refused: {e}")))?;
            self.next += 1;
        }
    }

    /// Simulator steps taken so far.
    pub fn steps(&self) -> u64 {
        self.scenario.steps()
    }

    /// The point the replay stops at.
    pub fn target(&self) -> Stamp {
        self.target
    }

    /// The scenario so far (to take snapshots of on the way).
    pub fn scenario(&mut self) -> &mut Scenario {
        &mut self.scenario
    }

    /// The rebuilt scenario, once the target is reached.
    pub fn finish(self) -> Result<Scenario, CommandError> {
        let time_off = self.exact_time && self.scenario.now_ms() != self.target.at_ms;
        if self.next < self.commands.len() || self.scenario.steps() != self.target.step || time_off
        {
            return refuse(format!(
                "the replay is not finished: at step {} of {}",
                self.scenario.steps(),
                self.target.step
            ));
        }
        Ok(self.scenario)
    }
}
