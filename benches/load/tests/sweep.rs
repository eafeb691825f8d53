//! The connection sweep: its argument parsing, the generator-lateness verdict, and a whole
//! sweep against two mock servers (this crate's `mock` subcommand as separate processes).

use std::time::Duration;

use segcache_bench::client::{late_fraction, ClientConfig, StepResult, LATE_NS};
use segcache_bench::histo;
use segcache_bench::server::ServerSpec;
use segcache_bench::sweep::{
    judge_generator, parse_conns, rates_per_count, read_sweep, run_sweep, SweepConfig, MAX_LATE_FRACTION,
};
use segcache_bench::workload::Workload;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn mock_spec(name: &str, delay_us: u64) -> ServerSpec {
    let port = free_port();
    ServerSpec {
        name: name.into(),
        program: env!("CARGO_BIN_EXE_segcache-bench").into(),
        args: vec!["mock".into(), "--port".into(), port.to_string(), "--delay-us".into(), delay_us.to_string()],
        port,
        core: None,
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
        servers: vec![mock_spec("base", 0), mock_spec("other", 0)],
        client: ClientConfig::new("127.0.0.1:1".parse().unwrap()),
        conns: vec![4, 40],
        rates: vec![400.0],
        step: Duration::from_millis(500),
        prefill_conns: 2,
        idle_conns: 60,
        command: "test".into(),
    };
    let r = run_sweep(&cfg).unwrap();
    // Each count runs both servers, alternating which goes first.
    let order: Vec<(usize, &str)> = r.points.iter().map(|p| (p.connections, p.server.as_str())).collect();
    assert_eq!(order, vec![(4, "base"), (4, "other"), (40, "other"), (40, "base")]);
    for p in &r.points {
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
    let png = std::fs::read(out.join("sweep.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    assert!(png.len() > 5000);
    let back = read_sweep(&out.join("sweep.json")).unwrap();
    assert_eq!(back.points.len(), 4);
    let _ = std::fs::remove_dir_all(&out);
}
