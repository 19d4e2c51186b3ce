//! SVG plots of results (plotters, SVG backend only): latency by percentile on a
//! `log10(1 / (1 - q))` axis, as HdrHistogram plots it, and latency and throughput over
//! time.
//!
//! Invariant: plots draw the result's own numbers; an empty series is left out, never
//! filled in.

use std::path::Path;

use plotters::prelude::*;

use crate::result::RunResult;

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// The percentile axis position of `pct` (0..100).
fn nines(pct: f64) -> f64 {
    -(1.0 - (pct / 100.0).min(0.999_999_9)).log10()
}

fn nines_label(x: &f64) -> String {
    let q = 100.0 * (1.0 - 10f64.powf(-x));
    if *x < 0.5 {
        format!("{q:.0}%")
    } else {
        let digits = (x.round() as usize).saturating_sub(2);
        format!("{q:.digits$}%")
    }
}

type Series<'a> = (String, &'a [(f64, u64)]);
/// A named per-second figure.
type Field = (&'static str, fn(&crate::result::SecondRow) -> u64);

/// Latency by percentile of several named curves (percentile %, µs) into one SVG.
pub fn percentiles(path: &Path, title: &str, series: &[Series<'_>]) -> anyhow::Result<()> {
    let series: Vec<&Series<'_>> = series.iter().filter(|s| !s.1.is_empty()).collect();
    let x_max = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| nines(p.0)))
        .fold(1.0f64, f64::max)
        .ceil();
    let y_max = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1 as f64 / 1000.0))
        .fold(0.001f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (ms)")
        .x_labels(x_max as usize + 1)
        .x_label_formatter(&nines_label)
        .draw()
        .map_err(plot_err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                pts.iter()
                    .map(|&(pct, us)| (nines(pct), us as f64 / 1000.0)),
                color.stroke_width(2),
            ))
            .map_err(plot_err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

/// Latency (p50, p99, max per second) above throughput (records/s) over time.
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
pub fn timeline(path: &Path, title: &str, r: &RunResult) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (900, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (top, bottom) = root.split_vertically(340);
    let t_max = (r.timeline.len() as f64).max(1.0);
    let y_max = r
        .timeline
        .iter()
        .map(|s| s.max_us as f64 / 1000.0)
        .fold(0.001, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&top)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .y_desc("latency (ms)")
        .draw()
        .map_err(plot_err)?;
    let lines: [Field; 3] = [
        ("p50", |s| s.p50_us),
        ("p99", |s| s.p99_us),
        ("max", |s| s.max_us),
    ];
    for (i, (name, f)) in lines.iter().enumerate() {
        let color = COLORS[i];
        chart
            .draw_series(LineSeries::new(
                r.timeline
                    .iter()
                    // A second without samples has no latency, not a latency of zero.
                    .filter(|s| s.max_us > 0)
                    .map(|s| (s.t_s as f64 + 0.5, f(s) as f64 / 1000.0)),
                color.stroke_width(2),
            ))
            .map_err(plot_err)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    let rec_max = r
        .timeline
        .iter()
        .map(|s| s.acked_records.max(s.consumed_records) as f64)
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..t_max, 0f64..rec_max)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds after warm-up")
        .y_desc("records/s")
        .draw()
        .map_err(plot_err)?;
    let flows: [Field; 2] = [
        ("acked", |s| s.acked_records),
        ("consumed", |s| s.consumed_records),
    ];
    for (i, (name, f)) in flows.iter().enumerate() {
        if r.timeline.iter().all(|s| f(s) == 0) {
            continue;
        }
        let color = COLORS[3 + i];
        chart
            .draw_series(LineSeries::new(
                r.timeline.iter().map(|s| (s.t_s as f64 + 0.5, f(s) as f64)),
                color.stroke_width(2),
            ))
            .map_err(plot_err)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

/// The two plots of one result, next to `stem` (`<stem>.percentiles.svg`,
/// `<stem>.timeline.svg`); returns their paths.
pub fn write_all(stem: &Path, r: &RunResult) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let pct = stem.with_extension("percentiles.svg");
    let series: Vec<Series<'_>> = r
        .curves
        .iter()
        .map(|(k, v)| (k.clone(), v.as_slice()))
        .collect();
    percentiles(
        &pct,
        &format!("{}: latency by percentile", r.label),
        &series,
    )?;
    let tl = stem.with_extension("timeline.svg");
    timeline(
        &tl,
        &format!("{}: latency and throughput over time", r.label),
        r,
    )?;
    Ok(vec![pct, tl])
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plotting: {e:?}")
}
