//! Renderings of a [`Report`]: the terminal table and JSON.

use std::fmt::Write;
use std::time::Duration;

use super::{Report, Row, ENGINES};

/// Milliseconds with three significant digits.
fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1e3;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Decimal gigabytes per second of `bytes` moved in `d`.
pub fn gbps(bytes: usize, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        bytes as f64 / d.as_secs_f64() / 1e9
    }
}

/// The engine names with `xN` spelled out.
pub fn table_engine_names(threads: usize) -> Vec<String> {
    ENGINES
        .iter()
        .map(|e| e.replace("xN", &format!("x{threads}")))
        .collect()
}

impl Row {
    /// Median time of engine `e` (in [`ENGINES`] order).
    pub fn median(&self, e: usize) -> Duration {
        self.timings[e].median()
    }

    /// How many times faster engine `fast` is than engine `slow`, by medians.
    pub fn speedup(&self, slow: usize, fast: usize) -> f64 {
        let f = self.median(fast).as_secs_f64();
        if f == 0.0 {
            0.0
        } else {
            self.median(slow).as_secs_f64() / f
        }
    }
}

/// The readable table: median ms / GB/s per engine, speed-ups and compile time.
pub fn table(report: &Report) -> String {
    let names = table_engine_names(report.threads);
    let mut header = vec!["workload".to_string(), "MB".to_string()];
    header.extend(names.iter().map(|n| format!("{n} ms / GB/s")));
    header.extend([
        "jit x1 vs interp".to_string(),
        format!("jit x{} vs x1", report.threads),
        "compile us".to_string(),
        "1st calls compile us".to_string(),
    ]);
    let mut lines = vec![header];
    for row in &report.rows {
        let mut cells = vec![
            row.workload.to_string(),
            format!("{:.0}", row.bytes as f64 / 1e6),
        ];
        for e in 0..ENGINES.len() {
            let m = row.median(e);
            cells.push(format!("{} / {:.1}", ms(m), gbps(row.bytes, m)));
        }
        cells.push(format!("{:.1}x", row.speedup(0, 1)));
        cells.push(format!("{:.2}x", row.speedup(1, 2)));
        cells.push(format!("{:.0}", row.compile.as_secs_f64() * 1e6));
        cells.push(format!("{:.0}", row.first_use_compile.as_secs_f64() * 1e6));
        lines.push(cells);
    }
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|c| lines.iter().map(|l| l[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, &w))| {
                if c == 0 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
            out.push_str(&rule.join("  "));
            out.push('\n');
        }
    }
    let _ =
        writeln!(
        out,
        "\nmedians of {} rounds or more; jit = run_into a reused output buffer (data unchanged); \
         copy = copy of an output-sized buffer + one read of indices and updates\n\
         cache hit: {} ns; sizes: {}",
        report.rows.iter().map(|r| r.timings[0].samples.len()).min().unwrap_or(0),
        report.cache_hit.as_nanos(),
        if report.quick { "--quick (reduced)" } else { "full suite" }
    );
    out
}

/// Escapes a string for a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_dims(dims: &[usize]) -> String {
    let items: Vec<String> = dims.iter().map(usize::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// The report as JSON: one object per workload, times in seconds, every sample included.
pub fn json(report: &Report) -> String {
    let names = table_engine_names(report.threads);
    let mut out = String::from("{\n");
    let _ = writeln!(out, "  \"threads\": {},", report.threads);
    let _ = writeln!(out, "  \"quick\": {},", report.quick);
    let _ = writeln!(
        out,
        "  \"cache_hit_s\": {:e},",
        report.cache_hit.as_secs_f64()
    );
    out.push_str("  \"workloads\": [\n");
    for (i, row) in report.rows.iter().enumerate() {
        out.push_str("    {\n");
        let _ = writeln!(out, "      \"name\": {},", json_string(row.workload));
        let _ = writeln!(out, "      \"key\": {},", json_string(&row.key));
        let _ = writeln!(out, "      \"data\": {},", json_dims(&row.shapes.0));
        let _ = writeln!(out, "      \"indices\": {},", json_dims(&row.shapes.1));
        let _ = writeln!(out, "      \"bytes\": {},", row.bytes);
        let _ = writeln!(out, "      \"compile_s\": {:e},", row.compile.as_secs_f64());
        let _ = writeln!(
            out,
            "      \"first_use_compile_s\": {:e},",
            row.first_use_compile.as_secs_f64()
        );
        out.push_str("      \"engines\": {\n");
        for (e, name) in names.iter().enumerate() {
            let t = &row.timings[e];
            let samples: Vec<String> = t
                .samples
                .iter()
                .map(|s| format!("{:e}", s.as_secs_f64()))
                .collect();
            let _ = write!(
                out,
                "        {}: {{\"median_s\": {:e}, \"min_s\": {:e}, \"gbps\": {:.3}, \"samples_s\": [{}]}}",
                json_string(name),
                t.median().as_secs_f64(),
                t.min().as_secs_f64(),
                gbps(row.bytes, t.median()),
                samples.join(", ")
            );
            out.push_str(if e + 1 < names.len() { ",\n" } else { "\n" });
        }
        out.push_str("      }\n    }");
        out.push_str(if i + 1 < report.rows.len() {
            ",\n"
        } else {
            "\n"
        });
    }
    out.push_str("  ]\n}\n");
    out
}
