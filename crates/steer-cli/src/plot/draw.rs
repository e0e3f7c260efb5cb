//! Drawing with plotters' SVG backend (no font files: the SVG viewer
//! renders the text): [`bench`] draws a steer-bench report as bar panels
//! (capacity, p99 latency, CPU cost per reply at each fixed rate; steer in
//! blue, the kernel's servers in orange, the rest grey), [`seed000`] the
//! steering-hook calls a second of seed 000's runs as one line per
//! topology and policy. Each returns the SVG document as a string.
//!
//! Invariant: every bar and point carries its value as text, so the
//! picture can be read without the axis, and checked by a test.

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::input::{BenchReport, BenchServer, Scatter, Seed000Run};

const STEER: RGBColor = RGBColor(31, 119, 180);
const KERNEL: RGBColor = RGBColor(255, 127, 14);
const OTHER: RGBColor = RGBColor(150, 150, 150);
const LINES: [RGBColor; 4] = [
    RGBColor(255, 127, 14),
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
];

type DrawResult<T> = Result<T, String>;

/// One bar: the server, its value, its colour.
type Bar = (String, f64, RGBColor);

fn err<E: std::fmt::Display>(e: E) -> String {
    format!("drawing: {e}")
}

/// A value as the bars label it.
fn label(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn color(s: &BenchServer) -> RGBColor {
    if s.is_steer() {
        STEER
    } else if s.is_kernel() {
        KERNEL
    } else {
        OTHER
    }
}

/// One panel of bars: one per server with a value.
fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    bars: &[Bar],
) -> DrawResult<()> {
    let max = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9) * 1.2;
    // A server's own cost can come out below zero (noise under the
    // reflector's): such bars go down from the axis.
    let min = bars.iter().map(|b| b.1).fold(0.0, f64::min) * 1.2;
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(56)
        // Integer ranges are inclusive: n bars are the segments of 0..=n-1.
        .build_cartesian_2d((0..bars.len().saturating_sub(1)).into_segmented(), min..max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len().max(1))
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                names.get(*i).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .y_label_formatter(&|y| label(*y))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v, c))| {
            let mut r = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), *v),
                ],
                c.filled(),
            );
            r.set_margin(0, 0, 6, 6);
            r
        }))
        .map_err(err)?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v, _))| {
            Text::new(
                label(*v),
                (SegmentValue::CenterOf(i), v.max(0.0) + (max - min) * 0.01),
                ("sans-serif", 12)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Bottom)),
            )
        }))
        .map_err(err)?;
    Ok(())
}

/// A steer-bench report as bar panels.
pub fn bench(report: &BenchReport, title: &str) -> DrawResult<String> {
    let pick = |f: &dyn Fn(&BenchServer) -> Option<f64>| -> Vec<Bar> {
        report
            .servers
            .iter()
            .filter_map(|s| f(s).map(|v| (s.name.clone(), v, color(s))))
            .collect()
    };
    let mut panels: Vec<(String, Vec<Bar>)> = vec![
        (
            "capacity, replies/s (higher is better)".into(),
            pick(&|s| s.capacity_pps),
        ),
        (
            "p99 latency, us (lower is better)".into(),
            pick(&|s| s.p99_us),
        ),
    ];
    let rates: Vec<f64> = report
        .servers
        .iter()
        .flat_map(|s| s.cost.iter().map(|c| c.0))
        .fold(Vec::new(), |mut v, r| {
            if !v.contains(&r) {
                v.push(r);
            }
            v
        });
    for rate in rates {
        panels.push((
            format!(
                "own CPU us per reply at {} replies/s (lower is better)",
                label(rate)
            ),
            pick(&|s| {
                s.cost
                    .iter()
                    .find(|c| c.0 == rate)
                    .and_then(|c| c.2.or(c.1))
            }),
        ));
    }
    panels.retain(|(_, b)| !b.is_empty());
    let rows = panels.len().div_ceil(2).max(1);
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (1000, 60 + 300 * rows as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
        let areas = root.split_evenly((rows, 2));
        for ((name, b), area) in panels.iter().zip(areas.iter()) {
            bars(area, name, b)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Seed 000's runs (one file each, in order) as lines of steering-hook
/// calls a second, one per topology and policy.
pub fn seed000(runs: &[Seed000Run], title: &str) -> DrawResult<String> {
    let mut names: Vec<String> = Vec::new();
    for r in runs {
        for (n, _) in &r.series {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    let max = runs
        .iter()
        .flat_map(|r| r.series.iter().map(|s| s.1))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.5;
    let n = runs.len();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0.5..n as f64 + 0.5, 0.0..max)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_labels(n.max(1))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 1.0 {
                    format!("run {i:.0}")
                } else {
                    String::new()
                }
            })
            .x_desc("run of benches/seeds/seed000-llc-steering.sh")
            .y_desc("steering updates per second (hook calls/s)")
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .map_err(err)?;
        for (k, name) in names.iter().enumerate() {
            let c = LINES[k % LINES.len()];
            let points: Vec<(f64, f64)> = runs
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    r.series
                        .iter()
                        .find(|s| &s.0 == name)
                        .map(|s| ((i + 1) as f64, s.1))
                })
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], c.stroke_width(2)));
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(err)?;
            chart
                .draw_series(points.iter().map(|&(x, y)| {
                    Text::new(
                        format!("{y:.0}"),
                        (x, y + max * 0.015),
                        ("sans-serif", 11)
                            .into_font()
                            .color(&c)
                            .pos(Pos::new(HPos::Center, VPos::Bottom)),
                    )
                }))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A scatter: one colour per series (in first-seen order), every point
/// labelled with its label; both axes from zero to a tenth past the
/// largest value.
pub fn scatter(sc: &Scatter) -> DrawResult<String> {
    let mut names: Vec<&str> = Vec::new();
    for (series, ..) in &sc.points {
        if !names.contains(&series.as_str()) {
            names.push(series);
        }
    }
    let xmax = sc.points.iter().map(|p| p.2).fold(0.0, f64::max).max(1.0) * 1.1;
    let ymax = sc.points.iter().map(|p| p.3).fold(0.0, f64::max).max(1.0) * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 640)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(sc.title.as_str(), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(sc.x_label.as_str())
            .y_desc(sc.y_label.as_str())
            .draw()
            .map_err(err)?;
        for (k, name) in names.iter().enumerate() {
            let c = match *name {
                "steer" => STEER,
                "kernel-echo" => KERNEL,
                _ => LINES[k % LINES.len()],
            };
            let pts: Vec<&(String, String, f64, f64)> =
                sc.points.iter().filter(|p| p.0 == *name).collect();
            chart
                .draw_series(pts.iter().map(|p| Circle::new((p.2, p.3), 4, c.filled())))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.filled()));
            chart
                .draw_series(pts.iter().map(|p| {
                    Text::new(
                        p.1.clone(),
                        (p.2, p.3 + ymax * 0.01),
                        ("sans-serif", 10)
                            .into_font()
                            .color(&c)
                            .pos(Pos::new(HPos::Left, VPos::Bottom)),
                    )
                }))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scatter_labels_every_point_and_names_its_series() {
        let sc = Scatter {
            title: "frontier".into(),
            x_label: "server CPU us per reply".into(),
            y_label: "p99 latency, us".into(),
            points: vec![
                ("steer".into(), "steer sleep @50k".into(), 7.5, 80.0),
                ("steer".into(), "steer busy-poll @50k".into(), 20.0, 15.0),
                ("kernel-echo".into(), "kernel-echo @50k".into(), 9.0, 900.0),
            ],
        };
        let svg = scatter(&sc).unwrap();
        for text in [
            "steer sleep @50k",
            "steer busy-poll @50k",
            "kernel-echo @50k",
            "server CPU us per reply",
            "p99 latency, us",
        ] {
            assert!(svg.contains(text), "{text}");
        }
        assert!(
            scatter(&Scatter {
                points: Vec::new(),
                ..sc
            })
            .is_ok(),
            "empty draws axes"
        );
    }
}
