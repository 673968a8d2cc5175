//! `--plot FILE.svg`: a bar chart of a [`Report`], GB/s per engine and workload.

use std::path::Path;

use plotters::prelude::*;

use super::report::{gbps, table_engine_names};
use super::Report;
use super::{Error, Result};

/// One colour per engine, in [`super::ENGINES`] order.
const COLOURS: [RGBColor; 4] = [
    RGBColor(0x99, 0x99, 0x99),
    RGBColor(0x4c, 0x72, 0xb0),
    RGBColor(0x1f, 0x3a, 0x93),
    RGBColor(0xdd, 0x84, 0x52),
];

/// Writes the chart to `path` as SVG: one group of horizontal bars per workload. The file
/// is replaced atomically, so a failed run leaves an older chart whole.
pub fn write_svg(report: &Report, path: &Path) -> Result<()> {
    let failed = |e: &dyn std::fmt::Display| {
        Error::Run(format!("cannot draw the chart {}: {e}", path.display()))
    };
    let svg = draw(report).map_err(|e| failed(&e))?;
    crate::atomic::write(path, &[svg.as_bytes()]).map_err(|e| failed(&e))
}

/// The chart's SVG text.
fn draw(report: &Report) -> std::result::Result<String, DrawingAreaErrorKind<std::io::Error>> {
    let mut svg = String::new();
    let rows = report.rows.len().max(1);
    let engines = COLOURS.len();
    let height = 120 + 26 * (engines as u32 + 1) * rows as u32;
    let root = SVGBackend::with_string(&mut svg, (960, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let best = report
        .rows
        .iter()
        .flat_map(|r| (0..engines).map(|e| gbps(r.bytes, r.median(e))))
        .fold(1.0f64, f64::max);
    let names: Vec<&str> = report.rows.iter().map(|r| r.workload).collect();
    let slot = (engines + 1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "scatterjit bench: GB/s of essential traffic (median; {})",
                if report.quick {
                    "--quick sizes"
                } else {
                    "full suite"
                }
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(12)
        .build_cartesian_2d(0f64..best * 1.1, (rows as f64 * slot)..0f64)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("GB/s (higher is better)")
        .y_labels(0)
        .draw()?;
    // Each group is captioned with its workload, inside the plot above its bars.
    chart.draw_series(names.iter().enumerate().map(|(i, name)| {
        Text::new(
            name.to_string(),
            (best * 0.005, i as f64 * slot + 0.05),
            ("sans-serif", 13),
        )
    }))?;
    for (e, name) in table_engine_names(report.threads).iter().enumerate() {
        let colour = COLOURS[e];
        chart
            .draw_series(report.rows.iter().enumerate().map(|(i, r)| {
                let top = i as f64 * slot + 0.6 + e as f64;
                let value = gbps(r.bytes, r.median(e));
                Rectangle::new([(0.0, top), (value, top + 0.9)], colour.filled())
            }))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    drop(chart);
    drop(root);
    Ok(svg)
}
