//! The ramp: rates raised in steps until the p99.9 SLO breaks, and the search for the
//! highest rate that kept it.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::client::StepResult;

/// What a step must meet to count as "inside the SLO".
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Slo {
    /// p99.9 latency limit in microseconds (default 1 ms).
    pub p999_us: f64,
    /// The server must deliver at least this fraction of the target rate.
    pub min_achieved: f64,
    /// Errors plus timeouts may be at most this fraction of requests.
    pub max_error_ratio: f64,
}

impl Default for Slo {
    fn default() -> Self {
        Slo { p999_us: 1000.0, min_achieved: 0.95, max_error_ratio: 0.0 }
    }
}

/// Why a step passed or failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    Pass,
    /// p99.9 over the limit.
    Latency,
    /// The server fell behind the offered rate.
    Throughput,
    /// Errors or timeouts.
    Errors,
    /// No replies at all.
    Empty,
}

impl Slo {
    pub fn judge(&self, s: &StepResult) -> Verdict {
        let c = &s.counters;
        if c.completed == 0 {
            return Verdict::Empty;
        }
        let bad = (c.errors + c.timeouts) as f64 / c.sent.max(1) as f64;
        if bad > self.max_error_ratio {
            return Verdict::Errors;
        }
        if s.achieved_rate < self.min_achieved * s.target_rate {
            return Verdict::Throughput;
        }
        if s.latency.p999_us > self.p999_us {
            return Verdict::Latency;
        }
        Verdict::Pass
    }

    pub fn passes(&self, s: &StepResult) -> bool {
        self.judge(s) == Verdict::Pass
    }

    /// The highest target rate among the steps that passed.
    pub fn highest_passing(&self, steps: &[StepResult]) -> Option<f64> {
        steps
            .iter()
            .filter(|s| self.passes(s))
            .map(|s| s.target_rate)
            .fold(None, |m, r| Some(m.map_or(r, |m: f64| m.max(r))))
    }
}

/// The rates a ramp tries: start, start+step, ... up to stop.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RampPlan {
    pub start: f64,
    pub step: f64,
    pub stop: f64,
    /// Stop after this many failed steps in a row.
    pub stop_after_fails: usize,
}

impl RampPlan {
    pub fn validate(&self) -> Result<()> {
        if !(self.start > 0.0 && self.step > 0.0 && self.stop >= self.start) {
            bail!("ramp needs 0 < start <= stop and step > 0 (got {} .. {} by {})", self.start, self.stop, self.step);
        }
        if self.stop_after_fails == 0 {
            bail!("stop-after-fails must be at least 1");
        }
        if (self.stop - self.start) / self.step > 10_000.0 {
            bail!("ramp has more than 10000 steps");
        }
        Ok(())
    }

    pub fn rates(&self) -> Vec<f64> {
        let mut v = Vec::new();
        let mut i = 0u64;
        loop {
            let r = self.start + i as f64 * self.step;
            if r > self.stop + 1e-9 {
                break;
            }
            v.push(r);
            i += 1;
        }
        v
    }
}

/// One server's progress through a ramp; several can be stepped alternately.
#[derive(Clone, Debug)]
pub struct RampState {
    rates: Vec<f64>,
    next: usize,
    fails_in_row: usize,
    stop_after_fails: usize,
}

impl RampState {
    pub fn new(plan: &RampPlan) -> Self {
        RampState { rates: plan.rates(), next: 0, fails_in_row: 0, stop_after_fails: plan.stop_after_fails }
    }

    /// The next rate to run, or None when the ramp is over.
    pub fn next_rate(&self) -> Option<f64> {
        if self.fails_in_row >= self.stop_after_fails {
            return None;
        }
        self.rates.get(self.next).copied()
    }

    pub fn record(&mut self, passed: bool) {
        self.next += 1;
        self.fails_in_row = if passed { 0 } else { self.fails_in_row + 1 };
    }
}

/// Runs a whole ramp with `step(rate)`; returns every step measured.
pub fn run_ramp(
    plan: &RampPlan,
    slo: &Slo,
    mut step: impl FnMut(f64) -> Result<StepResult>,
) -> Result<Vec<StepResult>> {
    plan.validate()?;
    let mut state = RampState::new(plan);
    let mut out = Vec::new();
    while let Some(rate) = state.next_rate() {
        let r = step(rate)?;
        state.record(slo.passes(&r));
        out.push(r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Counters;

    /// A fake server whose p99.9 grows with load: `base + k * rate`, capped in throughput.
    fn fake_step(rate: f64, base_us: f64, k: f64, capacity: f64) -> StepResult {
        let mut s = StepResult { target_rate: rate, ..Default::default() };
        s.achieved_rate = rate.min(capacity);
        s.latency.p999_us = base_us + k * rate;
        s.counters = Counters { sent: 1000, completed: 1000, completed_in_window: 1000, ..Default::default() };
        s
    }

    #[test]
    fn judge_each_failure_mode() {
        let slo = Slo::default();
        assert_eq!(slo.judge(&fake_step(10_000.0, 100.0, 0.0, 1e9)), Verdict::Pass);
        assert_eq!(slo.judge(&fake_step(10_000.0, 1500.0, 0.0, 1e9)), Verdict::Latency);
        assert_eq!(slo.judge(&fake_step(10_000.0, 100.0, 0.0, 9000.0)), Verdict::Throughput);
        let mut e = fake_step(10_000.0, 100.0, 0.0, 1e9);
        e.counters.timeouts = 1;
        assert_eq!(slo.judge(&e), Verdict::Errors);
        let lenient = Slo { max_error_ratio: 0.01, ..Slo::default() };
        assert_eq!(lenient.judge(&e), Verdict::Pass);
        assert_eq!(slo.judge(&StepResult::default()), Verdict::Empty);
        // Exactly at the limit passes: "stays under" includes equality at HDR resolution.
        assert_eq!(slo.judge(&fake_step(10_000.0, 1000.0, 0.0, 1e9)), Verdict::Pass);
    }

    #[test]
    fn rates_cover_the_plan() {
        let p = RampPlan { start: 10_000.0, step: 5_000.0, stop: 30_000.0, stop_after_fails: 2 };
        assert_eq!(p.rates(), vec![10_000.0, 15_000.0, 20_000.0, 25_000.0, 30_000.0]);
        assert!(RampPlan { start: 0.0, ..p.clone() }.validate().is_err());
        assert!(RampPlan { stop: 5.0, ..p.clone() }.validate().is_err());
        assert!(RampPlan { stop_after_fails: 0, ..p }.validate().is_err());
    }

    #[test]
    fn search_finds_the_knee() {
        // p99.9 = 200 us + 0.02 us per req/s: crosses 1 ms at 40k req/s.
        let plan = RampPlan { start: 5_000.0, step: 5_000.0, stop: 100_000.0, stop_after_fails: 2 };
        let slo = Slo::default();
        let mut calls = Vec::new();
        let steps = run_ramp(&plan, &slo, |r| {
            calls.push(r);
            Ok(fake_step(r, 200.0, 0.02, 1e9))
        })
        .unwrap();
        assert_eq!(slo.highest_passing(&steps), Some(40_000.0));
        // It stopped after two failures in a row (45k, 50k) instead of running to 100k.
        assert_eq!(calls.last(), Some(&50_000.0));
        assert_eq!(steps.len(), 10);
    }

    #[test]
    fn search_survives_one_noisy_step() {
        let plan = RampPlan { start: 10_000.0, step: 10_000.0, stop: 100_000.0, stop_after_fails: 2 };
        let slo = Slo::default();
        // 30k has a one-off spike; 60k is where capacity really ends.
        let steps = run_ramp(&plan, &slo, |r| {
            let mut s = fake_step(r, 300.0, 0.0, 55_000.0);
            if r == 30_000.0 {
                s.latency.p999_us = 5000.0;
            }
            Ok(s)
        })
        .unwrap();
        assert_eq!(slo.highest_passing(&steps), Some(50_000.0));
        assert_eq!(steps.len(), 7);
    }

    #[test]
    fn nothing_passes_means_none() {
        let plan = RampPlan { start: 10_000.0, step: 10_000.0, stop: 50_000.0, stop_after_fails: 1 };
        let slo = Slo::default();
        let steps = run_ramp(&plan, &slo, |r| Ok(fake_step(r, 2000.0, 0.0, 1e9))).unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!(slo.highest_passing(&steps), None);
    }

    #[test]
    fn alternating_states_are_independent() {
        let plan = RampPlan { start: 1.0, step: 1.0, stop: 5.0, stop_after_fails: 1 };
        let mut a = RampState::new(&plan);
        let mut b = RampState::new(&plan);
        a.record(true);
        b.record(false);
        assert_eq!(a.next_rate(), Some(2.0));
        assert_eq!(b.next_rate(), None);
    }
}
