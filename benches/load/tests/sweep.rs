//! The connection sweep: its argument parsing, the generator-lateness verdict, the medians
//! over rounds, the server core's share, and a whole sweep against two mock servers (this
//! crate's `mock` subcommand as separate processes).

use std::time::Duration;

use segcache_bench::client::{late_fraction, ClientConfig, StepResult, LATE_NS};
use segcache_bench::histo;
use segcache_bench::plot::sweep_marks;
use segcache_bench::server::ServerSpec;
use segcache_bench::sweep::{
    interference, judge_generator, median, parse_conns, rates_per_count, read_sweep, run_sweep, summaries,
    sweep_markdown, GeneratorVerdict, SweepConfig, SweepPoint, SweepReport, SweepServer, MAX_LATE_FRACTION,
};
use segcache_bench::workload::Workload;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn mock_spec(name: &str, delay_us: u64, core: Option<usize>) -> ServerSpec {
    let port = free_port();
    ServerSpec {
        name: name.into(),
        program: env!("CARGO_BIN_EXE_segcache-bench").into(),
        args: vec!["mock".into(), "--port".into(), port.to_string(), "--delay-us".into(), delay_us.to_string()],
        port,
        core,
        rt_priority: None,
    }
}

#[test]
fn connection_lists_parse_with_k_suffixes() {
    assert_eq!(parse_conns("16,1k,5000,10K").unwrap(), vec![16, 1000, 5000, 10_000]);
    assert_eq!(parse_conns(" 200 ").unwrap(), vec![200]);
    for bad in ["", "0", "16,,32", "abc", "1k5", "16,16", "-3"] {
        assert!(parse_conns(bad).is_err(), "{bad:?} should be rejected");
    }
    assert_eq!(rates_per_count(&[40e3], 3).unwrap(), vec![40e3; 3]);
    assert_eq!(rates_per_count(&[40e3, 40e3, 20e3], 3).unwrap(), vec![40e3, 40e3, 20e3]);
    assert!(rates_per_count(&[40e3, 20e3], 3).is_err());
    assert!(rates_per_count(&[0.0], 1).is_err());
}

#[test]
fn late_fraction_counts_sends_over_one_millisecond() {
    let mut h = histo::new_hist();
    for _ in 0..997 {
        histo::record(&mut h, 20_000); // 20 us late
    }
    histo::record(&mut h, LATE_NS); // exactly 1 ms is not "more than 1 ms"
    histo::record(&mut h, 5_000_000);
    histo::record(&mut h, 40_000_000);
    let f = late_fraction(&h);
    assert!((f - 0.002).abs() < 1e-9, "{f}");
    assert_eq!(late_fraction(&histo::new_hist()), 0.0);
}

fn step(rate: f64, secs: f64, sent: u64, late: f64) -> StepResult {
    let mut s = StepResult { target_rate: rate, duration_s: secs, late_fraction: late, ..Default::default() };
    s.counters.sent = sent;
    s.send_lag.p999_us = if late > MAX_LATE_FRACTION { 4_000.0 } else { 30.0 };
    s
}

#[test]
fn the_interval_median_ignores_one_stalled_second() {
    use segcache_bench::client::IntervalResult;
    use segcache_bench::sweep::median_interval_p999;
    let iv = |p999: f64| {
        let mut i = IntervalResult::default();
        i.latency.count = 100;
        i.latency.p999_us = p999;
        i
    };
    let mut s = StepResult::default();
    assert_eq!(median_interval_p999(&s), None);
    s.intervals = vec![iv(500.0), iv(50_000.0), iv(700.0)];
    assert_eq!(median_interval_p999(&s), Some(700.0));
    s.intervals.push(iv(900.0));
    assert_eq!(median_interval_p999(&s), Some(800.0));
}

#[test]
fn the_verdict_flags_a_generator_that_fell_behind() {
    // On time: every scheduled request sent (one short per thread is the schedule's rounding).
    let ok = judge_generator(&step(40_000.0, 10.0, 399_999, 0.0004), 1000, 1);
    assert!(ok.kept, "{ok:?}");
    assert_eq!((ok.scheduled, ok.sent), (400_000, 399_999));
    assert!(ok.note.contains("kept its schedule at 1000 connections"), "{}", ok.note);

    // 1% of the sends over 1 ms late: the p99.9 is the generator's, not the server's.
    let late = judge_generator(&step(40_000.0, 10.0, 400_000, 0.01), 10_000, 1);
    assert!(!late.kept);
    assert!(late.note.contains("COULD NOT KEEP UP at 10000 connections"), "{}", late.note);
    assert!(late.note.contains("1.00% of requests sent more than 1 ms late"), "{}", late.note);

    // Sends missing from the schedule, even if those sent were on time.
    let short = judge_generator(&step(20_000.0, 10.0, 150_000, 0.0), 10_000, 2);
    assert!(!short.kept);
    assert!(short.note.contains("sent 150000 of 200000 scheduled requests"), "{}", short.note);

    // Right at the limit still passes; just over it does not.
    assert!(judge_generator(&step(1000.0, 1.0, 1000, MAX_LATE_FRACTION), 16, 1).kept);
    assert!(!judge_generator(&step(1000.0, 1.0, 1000, MAX_LATE_FRACTION * 1.5), 16, 1).kept);
}

#[test]
fn a_sweep_runs_every_server_at_every_count_and_writes_its_outputs() {
    let out = std::env::temp_dir().join(format!("segcache-bench-sweep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut w = Workload::momento();
    w.keys = 1000;
    let cfg = SweepConfig {
        out: out.clone(),
        workload: w,
        // The baseline pinned to core 0 (taskset): its steps also give that core's steal.
        servers: vec![mock_spec("base", 0, Some(0)), mock_spec("other", 0, None)],
        client: ClientConfig::new("127.0.0.1:1".parse().unwrap()),
        conns: vec![4, 40],
        rates: vec![400.0],
        step: Duration::from_millis(500),
        rounds: 2,
        prefill_conns: 2,
        idle_conns: 60,
        command: "test".into(),
    };
    let r = run_sweep(&cfg).unwrap();
    // Each count runs both servers in each round, alternating which goes first from count to
    // count and from round to round.
    let order: Vec<(usize, usize, &str)> =
        r.points.iter().map(|p| (p.round, p.connections, p.server.as_str())).collect();
    assert_eq!(
        order,
        vec![
            (0, 4, "base"),
            (0, 4, "other"),
            (0, 40, "other"),
            (0, 40, "base"),
            (1, 4, "other"),
            (1, 4, "base"),
            (1, 40, "base"),
            (1, 40, "other"),
        ]
    );
    assert_eq!(r.rounds, 2);
    for p in &r.points {
        let i = p.interference.as_ref().expect("the mock's schedstats are read from /proc");
        assert_eq!(i.steal_ms_per_s.is_some(), p.server == "base", "only a pinned server's core has steal: {p:?}");
        // ms per second of a 0.5 s step, summed over the server's threads (so more than one
        // core's worth when several wait at once on a busy machine); steal is the core's, at
        // most all of it (counted in whole ticks).
        assert!(i.runq_wait_ms_per_s.is_finite() && i.runq_wait_ms_per_s >= 0.0, "{i:?}");
        assert!(i.steal_ms_per_s.is_none_or(|s| (0.0..=1100.0).contains(&s)), "{i:?}");
        let c = &p.step.counters;
        assert!(c.completed > 0 && c.errors == 0, "{c:?}");
        assert!(p.step.server_cpu_us_per_req.is_some());
        assert!(p.step.server_rss_kb.is_some_and(|k| k > 0), "the mock's RSS is read from /proc");
        assert_eq!(p.generator.scheduled, 200);
        assert_eq!(p.generator.kept, judge_generator(&p.step, p.connections, 1).kept);
    }
    assert_eq!(r.idle.len(), 2);
    assert!(r.idle.iter().all(|i| i.connections == 60 && i.rss_idle_kb > 0));
    assert!(r.nofile.soft >= 60 + segcache_bench::sweep::SPARE_FDS);
    let md = std::fs::read_to_string(out.join("sweep.md")).unwrap();
    assert!(md.contains("| 40 | other |") && md.contains("| 4 | base |"), "{md}");
    assert!(md.contains("p99.99 ms") && md.contains("p99.9 x base"), "{md}");
    // Several rounds: the medians first, then a row per step with its round.
    assert!(md.contains("Medians over the rounds") && md.contains("| 40 | other | 2 | "), "{md}");
    assert_eq!(md.matches("| 4 | base |").count(), 3, "one median row and two steps: {md}");
    assert!(md.contains("waited for its core ms/s (steal)"), "{md}");
    let png = std::fs::read(out.join("sweep.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    assert!(png.len() > 5000);
    let back = read_sweep(&out.join("sweep.json")).unwrap();
    assert_eq!(back.points.len(), 8);
    assert_eq!(back.points[4].round, 1);
    // `report` redraws a sweep's table and plot from its JSON.
    let again = out.join("again");
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_segcache-bench"))
        .arg("report")
        .arg(out.join("sweep.json"))
        .arg("--out")
        .arg(&again)
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    assert_eq!(std::fs::read_to_string(again.join("sweep.md")).unwrap(), md);
    assert_eq!(&std::fs::read(again.join("sweep.png")).unwrap()[1..4], b"PNG");
    let _ = std::fs::remove_dir_all(&out);
}

fn point(server: &str, conns: usize, round: usize, p999_us: f64, kept: bool, cpu: f64) -> SweepPoint {
    let mut step = StepResult::default();
    step.latency.count = 1000;
    step.latency.p999_us = p999_us;
    step.latency.p9999_us = p999_us * 2.0;
    step.server_cpu_us_per_req = Some(cpu);
    let generator = GeneratorVerdict { kept, ..Default::default() };
    SweepPoint { connections: conns, server: server.into(), round, step, generator, interference: None }
}

fn report(points: Vec<SweepPoint>) -> SweepReport {
    let servers = ["base", "new"].iter().map(|n| SweepServer { name: n.to_string(), command: String::new() }).collect();
    SweepReport { servers, points, rounds: 3, ..Default::default() }
}

#[test]
fn the_round_medians_count_only_steps_whose_generator_kept_up() {
    let r = report(vec![
        point("base", 1000, 0, 2000.0, true, 10.0),
        point("new", 1000, 0, 1000.0, true, 9.0),
        point("base", 1000, 1, 4000.0, true, 10.0),
        point("new", 1000, 1, 3000.0, true, 8.0),
        // Round 2: the baseline's generator fell behind: no ratio from this round, and its
        // huge p99.9 is not in the baseline's median.
        point("base", 1000, 2, 90_000.0, false, 10.0),
        point("new", 1000, 2, 500.0, true, 7.0),
        // Another count, listed after the first.
        point("base", 16, 0, 800.0, true, 10.0),
        point("new", 16, 0, 400.0, false, 10.0),
    ]);
    let s = summaries(&r);
    let row = |n: usize, srv: &str| s.iter().find(|c| c.connections == n && c.server == srv).unwrap().clone();
    assert_eq!(
        s.iter().map(|c| (c.connections, c.server.as_str())).collect::<Vec<_>>(),
        vec![(1000, "base"), (1000, "new"), (16, "base"), (16, "new")]
    );
    let base = row(1000, "base");
    assert_eq!((base.rounds, base.kept, base.p999_us, base.p999_ratio), (3, 2, Some(3000.0), Some(1.0)));
    let new = row(1000, "new");
    assert_eq!((new.kept, new.p999_us, new.p9999_us), (3, Some(1000.0), Some(2000.0)));
    // Ratios 0.5 and 0.75 in the rounds where both kept up; CPU 0.9, 0.8, 0.7 in all three.
    assert_eq!(new.p999_ratio, Some(0.625));
    assert!((new.cpu_ratio.unwrap() - 0.8).abs() < 1e-12);
    let late = row(16, "new");
    assert_eq!((late.kept, late.p999_us, late.p999_ratio), (0, None, None));
    assert_eq!(median(vec![]), None);
    assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));

    // The chart: medians over kept rounds, or over all of them (with a cross) when none kept up.
    let marks = sweep_marks(&r, "new");
    assert_eq!(
        marks.iter().map(|m| (m.connections, m.p999_us, m.kept)).collect::<Vec<_>>(),
        vec![(16, 400.0, false), (1000, 1000.0, true)]
    );
    let md = sweep_markdown(&r);
    assert!(md.contains("| 1000 | new | 3 / 3 | 1.000 | 2.000 | 0.62 | 0.80 |"), "{md}");
    assert!(md.contains("| 16 | new | 0 / 1 | - | - | - | 1.00 |"), "{md}");
}

#[test]
fn the_interference_is_per_second_of_the_step() {
    use segcache_bench::cpu::clk_tck;
    let step = StepResult { duration_s: 2.0, ..Default::default() };
    // Over 2 s the server waited 30 ms for its core (run queue, ns) and 0.04 s was stolen.
    let before = (Some((5_000_000_000, 1_000_000)), Some(7));
    let after = (Some((6_000_000_000, 31_000_000)), Some(7 + clk_tck() * 4 / 100));
    let i = interference(before, after, &step).unwrap();
    assert!((i.runq_wait_ms_per_s - 15.0).abs() < 1e-9, "{i:?}");
    assert!((i.steal_ms_per_s.unwrap() - 20.0).abs() < 1e-9, "{i:?}");
    // No steal without a pinned core; nothing without the server's schedstats.
    assert_eq!(interference((before.0, None), (after.0, None), &step).unwrap().steal_ms_per_s, None);
    assert_eq!(interference((None, Some(1)), after, &step), None);
}
