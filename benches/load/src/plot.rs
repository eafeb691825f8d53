//! PNG plots: latency percentiles against achieved throughput, one curve per server.
//! Text uses an embedded DejaVu Sans (ab_glyph), so plotting works on a headless box
//! with no fonts or fontconfig installed.

use std::path::Path;
use std::sync::Once;

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::client::StepResult;
use crate::report::Report;

/// One server's steps.
pub struct Curve {
    pub name: String,
    pub steps: Vec<StepResult>,
}

/// One chart (one workload).
pub struct Panel {
    pub title: String,
    pub curves: Vec<Curve>,
}

static FONT: Once = Once::new();

fn register_font() {
    FONT.call_once(|| {
        // The embedded font is a valid TrueType file; a failure would only lose the text.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

pub fn panels_from_report(r: &Report) -> Vec<Panel> {
    r.workloads
        .iter()
        .map(|w| Panel {
            title: w.workload.as_ref().map_or("workload".into(), |w| {
                let values = if w.value_min == w.value_max {
                    format!("{}-byte values", w.value_min)
                } else {
                    format!("{}-{} byte values", w.value_min, w.value_max)
                };
                let ratio = if w.delete == 0 {
                    format!("{}:{} get:set", w.get, w.set)
                } else {
                    format!("{}:{}:{} get:set:delete", w.get, w.set, w.delete)
                };
                format!(
                    "{}: {} keys, {}-byte keys, {values}, {ratio}, {}",
                    w.name,
                    w.keys,
                    w.key_len,
                    w.zipf.map_or("uniform".into(), |s| format!("Zipf {s}"))
                )
            }),
            curves: w.servers.iter().map(|s| Curve { name: s.name.clone(), steps: s.steps.clone() }).collect(),
        })
        .collect()
}

/// Draws one chart per panel, stacked, into `path` (PNG).
pub fn plot(path: &Path, panels: &[Panel], slo_us: f64) -> Result<()> {
    register_font();
    if panels.is_empty() {
        return Err(anyhow!("nothing to plot"));
    }
    let height = 480 * panels.len() as u32;
    let root = BitMapBackend::new(path, (1100, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
    let areas = root.split_evenly((panels.len(), 1));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        draw_panel(area, panel, slo_us)?;
    }
    root.present().map_err(|e| anyhow!("plot: writing {}: {e}", path.display()))?;
    Ok(())
}

fn draw_panel(area: &DrawingArea<BitMapBackend, plotters::coord::Shift>, p: &Panel, slo_us: f64) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("plot: {e}");
    let pts = |s: &StepResult| s.achieved_rate > 0.0 && s.latency.count > 0;
    let all: Vec<&StepResult> = p.curves.iter().flat_map(|c| c.steps.iter()).filter(|s| pts(s)).collect();
    let x_max = all.iter().map(|s| s.achieved_rate / 1000.0).fold(1.0, f64::max) * 1.08;
    let y_min = all.iter().map(|s| s.latency.p50_us / 1000.0).fold(slo_us / 1000.0, f64::min).max(0.001) / 1.5;
    let y_max = all.iter().map(|s| s.latency.p999_us / 1000.0).fold(slo_us / 1000.0, f64::max).min(60_000.0) * 1.5;
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("achieved throughput (thousand requests/s)")
        .y_desc("latency (ms, log)")
        .label_style(("sans-serif", 14))
        .light_line_style(RGBColor(240, 240, 240))
        .draw()
        .map_err(err)?;
    let slo = slo_us / 1000.0;
    chart
        .draw_series(LineSeries::new(vec![(0.0, slo), (x_max, slo)], BLACK.stroke_width(1)))
        .map_err(err)?
        .label(format!("SLO p99.9 {slo} ms"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    for (i, c) in p.curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut steps: Vec<&StepResult> = c.steps.iter().filter(|s| pts(s)).collect();
        steps.sort_by(|a, b| a.target_rate.total_cmp(&b.target_rate));
        type Pick = fn(&StepResult) -> f64;
        let series: [(&str, Pick, u32); 3] =
            [("p99.9", |s| s.latency.p999_us, 3), ("p99", |s| s.latency.p99_us, 1), ("p50", |s| s.latency.p50_us, 1)];
        for (label, get, width) in series {
            let data: Vec<(f64, f64)> =
                steps.iter().map(|s| (s.achieved_rate / 1000.0, (get(s) / 1000.0).clamp(y_min, y_max))).collect();
            let style = color.stroke_width(width);
            chart
                .draw_series(LineSeries::new(data.clone(), style))
                .map_err(err)?
                .label(format!("{} {label}", c.name))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width)));
            let marker = match label {
                "p99.9" => 0,
                "p99" => 1,
                _ => 2,
            };
            match marker {
                0 => chart.draw_series(data.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(err)?,
                1 => chart.draw_series(data.iter().map(|&p| TriangleMarker::new(p, 4, color))).map_err(err)?,
                _ => chart.draw_series(data.iter().map(|&p| Cross::new(p, 3, color))).map_err(err)?,
            };
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    Ok(())
}

/// One server at one count on the sweep's chart: the medians over the rounds whose generator
/// kept its schedule, or over every round (`kept` false: drawn with a cross) when none did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepMark {
    pub connections: usize,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub kept: bool,
}

/// `server`'s marks, by connection count: the medians of [`summaries`], and where no round kept
/// its schedule, the medians over every round.
///
/// [`summaries`]: crate::sweep_report::summaries
pub fn sweep_marks(r: &crate::sweep_report::SweepReport, server: &str) -> Vec<SweepMark> {
    use crate::sweep_report::{summaries, tail_medians};
    let mut out: Vec<SweepMark> = summaries(r)
        .into_iter()
        .filter(|c| c.server == server)
        .filter_map(|c| {
            let (p999, p9999, kept) = match (c.p999_us, c.p9999_us) {
                (Some(a), Some(b)) => (a, b, true),
                _ => {
                    let all = r.points.iter().filter(|p| p.server == server && p.connections == c.connections);
                    let (a, b) = tail_medians(all);
                    (a?, b?, false)
                }
            };
            Some(SweepMark { connections: c.connections, p999_us: p999, p9999_us: p9999, kept })
        })
        .collect();
    out.sort_by_key(|m| m.connections);
    out
}

/// The sweep's chart: p99.9 and p99.99 against the connection count (both axes log), one
/// colour per server, medians over the rounds; a cross over a point marks a count where the
/// generator fell behind in every round.
pub fn plot_sweep(path: &Path, r: &crate::sweep_report::SweepReport) -> Result<()> {
    register_font();
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("plot: {e}");
    let marks: Vec<(usize, Vec<SweepMark>)> =
        r.servers.iter().enumerate().map(|(i, s)| (i, sweep_marks(r, &s.name))).collect();
    let pts: Vec<&SweepMark> = marks.iter().flat_map(|(_, m)| m).collect();
    if pts.is_empty() {
        return Err(anyhow!("nothing to plot"));
    }
    let x_min = pts.iter().map(|p| p.connections as f64).fold(f64::MAX, f64::min) / 1.5;
    let x_max = pts.iter().map(|p| p.connections as f64).fold(1.0, f64::max) * 1.5;
    // Whole decades: a log axis labels only powers of ten, and a range inside one decade
    // would have none.
    let decade_below = |x: f64| 10f64.powf(x.log10().floor());
    let decade_above = |x: f64| 10f64.powf(x.log10().ceil());
    let y_min = decade_below(pts.iter().map(|p| p.p999_us / 1000.0).fold(f64::MAX, f64::min).max(0.001) / 1.2);
    let y_max = decade_above(pts.iter().map(|p| p.p9999_us / 1000.0).fold(0.01, f64::max).min(60_000.0) * 1.2);
    let root = BitMapBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let rates: Vec<String> = r.rates.iter().map(|x| format!("{x:.0}")).collect();
    let title = format!(
        "{} at {} req/s: tail latency vs connections{}",
        r.workload.as_ref().map_or("workload", |w| w.name.as_str()),
        rates.join("/"),
        if r.rounds > 1 { format!(" (medians of {} rounds)", r.rounds) } else { String::new() }
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("connections (log)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_desc("latency (ms, log); a cross: the generator fell behind")
        .label_style(("sans-serif", 14))
        .light_line_style(RGBColor(240, 240, 240))
        .draw()
        .map_err(err)?;
    for (i, mine) in &marks {
        let srv = &r.servers[*i];
        let color = COLORS[i % COLORS.len()];
        type Pick = fn(&SweepMark) -> f64;
        let series: [(&str, Pick, u32); 2] = [("p99.9", |p| p.p999_us, 3), ("p99.99", |p| p.p9999_us, 1)];
        for (label, get, width) in series {
            let data: Vec<(f64, f64)> =
                mine.iter().map(|p| (p.connections as f64, (get(p) / 1000.0).clamp(y_min, y_max))).collect();
            chart
                .draw_series(LineSeries::new(data.clone(), color.stroke_width(width)))
                .map_err(err)?
                .label(format!("{} {label}", srv.name))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width)));
            if width > 1 {
                chart.draw_series(data.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(err)?;
            } else {
                chart.draw_series(data.iter().map(|&p| TriangleMarker::new(p, 4, color))).map_err(err)?;
            }
            let late = mine.iter().zip(&data).filter(|(p, _)| !p.kept).map(|(_, &d)| d);
            chart.draw_series(late.map(|d| Cross::new(d, 8, BLACK.stroke_width(2)))).map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    root.present().map_err(|e| anyhow!("plot: writing {}: {e}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png() {
        let mk = |rate: f64, p999: f64| {
            let mut s = StepResult { target_rate: rate, achieved_rate: rate * 0.99, ..Default::default() };
            s.latency.count = 100;
            s.latency.p50_us = 80.0;
            s.latency.p99_us = p999 / 3.0;
            s.latency.p999_us = p999;
            s
        };
        let panels = vec![Panel {
            title: "test".into(),
            curves: vec![
                Curve { name: "a".into(), steps: vec![mk(10_000.0, 300.0), mk(20_000.0, 900.0), mk(30_000.0, 4000.0)] },
                Curve { name: "b".into(), steps: vec![mk(10_000.0, 200.0), mk(20_000.0, 400.0)] },
            ],
        }];
        let dir = std::env::temp_dir().join(format!("segcache-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.png");
        plot(&path, &panels, 1000.0).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(bytes.len() > 5_000, "a chart with text and lines, not a blank image");
        assert!(plot(&path, &[], 1000.0).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
