//! The comparison end to end, with two mock servers (this crate's `mock` subcommand run as
//! separate processes) standing in for memcached and segcache-server.

use std::time::Duration;

use segcache_bench::client::ClientConfig;
use segcache_bench::compare::{run_compare, CompareConfig};
use segcache_bench::ramp::{RampPlan, Slo};
use segcache_bench::server::ServerSpec;
use segcache_bench::workload::Workload;

/// The tests of this file run one at a time: each picks free ports by binding and releasing
/// them, and the other's servers and client connections could take one in between.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
fn compare_alternates_servers_and_writes_every_output() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::env::temp_dir().join(format!("segcache-bench-compare-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut w = Workload::momento();
    w.keys = 2000;
    w.value_min = 64;
    w.value_max = 64;
    let mut client = ClientConfig::new("127.0.0.1:1".parse().unwrap());
    client.connections = 4;
    client.depth = 16;
    let cfg = CompareConfig {
        out: out.clone(),
        workloads: vec![w],
        // The baseline is slow (400 ms replies, under the 1 s client timeout), the other fast.
        servers: vec![mock_spec("slow", 400_000), mock_spec("fast", 0)],
        client,
        plan: RampPlan { start: 200.0, step: 200.0, stop: 400.0, stop_after_fails: 1 },
        // Loose enough that a busy shared machine cannot fail the fast server (159 ms was seen
        // while a build ran beside it), tight enough to fail every reply of the slow one.
        slo: Slo { p999_us: 300_000.0, ..Slo::default() },
        step: Duration::from_millis(600),
        prefill_conns: 2,
        command: "test".into(),
    };
    let r = run_compare(&cfg).unwrap();
    assert_eq!(r.workloads.len(), 1);
    let servers = &r.workloads[0].servers;
    assert_eq!(servers[0].name, "slow");
    assert_eq!(servers[0].steps.len(), 1, "the slow server stops after its first failed step");
    assert_eq!(servers[0].max_rate_within_slo, None);
    assert_eq!(servers[1].steps.len(), 2);
    assert_eq!(servers[1].max_rate_within_slo, Some(400.0));
    for s in servers {
        assert_eq!(s.prefill.as_ref().unwrap().stored, 2000, "{}", s.name);
        for st in &s.steps {
            // CPU per request was read from the server process's /proc entry.
            assert!(st.server_cpu_us_per_req.is_some());
            assert_eq!(st.hit_ratio, Some(1.0), "prefilled keys are all hits");
        }
    }
    assert!(servers[0].steps[0].latency.p50_us >= 400_000.0);
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| momento | fast | 400 | - |"), "{md}");
    let png = std::fs::read(out.join("latency.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let json = segcache_bench::report::read_report(&out.join("results.json")).unwrap();
    assert_eq!(json.workloads[0].servers[1].steps.len(), 2);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_server_that_cannot_start_is_a_clear_error() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::env::temp_dir().join(format!("segcache-bench-compare-bad-{}", std::process::id()));
    let mut bad = mock_spec("bad", 0);
    bad.program = "/nonexistent/segcache-server".into();
    let cfg = CompareConfig {
        out: out.clone(),
        workloads: vec![Workload::momento()],
        servers: vec![bad],
        client: ClientConfig::new("127.0.0.1:1".parse().unwrap()),
        plan: RampPlan { start: 100.0, step: 100.0, stop: 100.0, stop_after_fails: 1 },
        slo: Slo::default(),
        step: Duration::from_millis(100),
        prefill_conns: 1,
        command: "test".into(),
    };
    let e = run_compare(&cfg).unwrap_err();
    assert!(format!("{e:#}").contains("/nonexistent/segcache-server"), "{e:#}");
    let _ = std::fs::remove_dir_all(&out);
}
