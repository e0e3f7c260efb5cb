//! How `steer stats` and `steer top` show a running `steer rfs` (an
//! [`RfsLive`] snapshot): a headline (the interface, ports, policy), the
//! recorder's and the program's lines (flows, updates and suppressed
//! changes per second, held back, forced, checksums) and a per-CPU table
//! of landed and redirected frames. Rates are taken against an earlier
//! snapshot of the same process when there is one (`steer top`), else as
//! means since start (`steer stats`). Pure rendering: no I/O.

use std::fmt::Write as _;

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::widgets::{Paragraph, Row, Widget};

use crate::rfs_live::{RfsCpu, RfsLive};
use crate::view::{bold_if, footer, framed_table, headline_line, rate, right, Samples};

/// Rates of `now` against `before` (same process, earlier), or since
/// start.
#[derive(Debug, Clone, Copy)]
struct Rates<'a> {
    now: &'a RfsLive,
    before: Option<&'a RfsLive>,
}

impl Rates<'_> {
    /// Seconds the rates are over.
    fn dt(&self) -> f64 {
        match self.before {
            Some(b) => self.now.uptime_s - b.uptime_s,
            None => self.now.uptime_s,
        }
    }

    /// `now - before` (0 without `before`) per second, or `-`.
    fn per_s(&self, value: impl Fn(&RfsLive) -> u64) -> String {
        let before = self.before.map_or(0, &value);
        rate(value(self.now), Some(before), self.dt())
    }

    /// A CPU's row in the earlier snapshot (`None`: the total).
    fn cpu_before(&self, cpu: Option<usize>) -> Option<RfsCpu> {
        match (self.before, cpu) {
            (None, _) => Some(RfsCpu::default()),
            (Some(b), Some(c)) => b.per_cpu.iter().find(|r| r.cpu == c).copied(),
            (Some(b), None) => Some(b.total()),
        }
    }

    /// A CPU's rate of `value`.
    fn cpu_per_s(&self, cpu: Option<usize>, now: &RfsCpu, value: fn(&RfsCpu) -> u64) -> String {
        let before = self.cpu_before(cpu).map(|b| value(&b));
        rate(value(now), before, self.dt())
    }
}

/// One line about the process.
pub fn headline(live: &RfsLive) -> String {
    format!(
        "steer rfs on {} (pid {}), up {}, policy {}, xdp {}, tcp ports {:?}, udp ports {:?}, CPUs {}",
        live.interface,
        live.pid,
        crate::view::uptime(live.uptime_s),
        live.policy,
        live.xdp_mode,
        live.tcp_ports,
        live.udp_ports,
        live.cpus,
    )
}

/// The recorders: flows, reads, updates and suppressed changes.
fn recorder_line(r: Rates<'_>) -> String {
    let c = &r.now.counters;
    format!(
        "flows: {} tracked, {} new, {} reads | updates {} ({}/s), suppressed by the LLC rule {} ({}/s)",
        r.now.flows_tracked,
        c.recorder_new_flows,
        c.recorded,
        c.recorder_updates,
        r.per_s(|l| l.counters.recorder_updates),
        c.recorder_suppressed,
        r.per_s(|l| l.counters.recorder_suppressed),
    )
}

/// The XDP program: redirects, order waits, forced moves; then drops and
/// checksums.
fn program_lines(live: &RfsLive) -> [String; 2] {
    let c = &live.counters;
    [
        format!(
            "program: {} redirected, {} moves, {} held back (order waits), {} forced, {} untracked, {} passed",
            c.redirected, c.moves, c.held_back, c.forced, c.untracked, c.passed,
        ),
        format!(
            "drops: queue full {}, redirect errors {}, no cpumap {} | partial checksums: {} completed, {} passed",
            c.queue_drops, c.redirect_errors, c.redirect_failed, c.csum_completed, c.csum_passed,
        ),
    ]
}

/// The per-CPU rows, then `all`: label, landed/s, redirected/s, landed,
/// redirected.
fn cpu_rows(r: Rates<'_>) -> Vec<[String; 5]> {
    let total = r.now.total();
    r.now
        .per_cpu
        .iter()
        .map(|row| (Some(row.cpu), *row))
        .chain(std::iter::once((None, total)))
        .map(|(cpu, row)| {
            [
                cpu.map_or("all".to_string(), |c| c.to_string()),
                r.cpu_per_s(cpu, &row, |x| x.landed),
                r.cpu_per_s(cpu, &row, |x| x.redirected),
                row.landed.to_string(),
                row.redirected.to_string(),
            ]
        })
        .collect()
}

/// The per-CPU table's header.
const CPU_HEADER: [&str; 5] = ["cpu", "landed/s", "redir/s", "landed", "redirected"];

/// `steer stats`' report: headline, the recorder's and the program's
/// lines, the per-CPU table (rates are means since start).
pub fn report(live: &RfsLive) -> String {
    let r = Rates {
        now: live,
        before: None,
    };
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", headline(live));
    let _ = writeln!(out, "{}", recorder_line(r));
    let [program, drops] = program_lines(live);
    let _ = writeln!(out, "{program}\n{drops}\n");
    for h in CPU_HEADER {
        let _ = write!(out, "{h:>11}");
    }
    out.push('\n');
    for row in cpu_rows(r) {
        for cell in row {
            let _ = write!(out, "{cell:>11}");
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "\nrates are means since start; `steer top` shows them over an interval"
    );
    out
}

/// `steer top`'s screen for a running `steer rfs` (the drawing is below;
/// the samples are [`Samples`]).
pub type RfsTopView = Samples<RfsLive>;

impl RfsTopView {
    fn rates(&self) -> Option<Rates<'_>> {
        self.before.as_ref().map(|b| Rates {
            now: &self.now,
            before: Some(b),
        })
    }

    /// Lines the screen needs.
    pub fn height(&self) -> u16 {
        1 + 1 + 2 + (self.now.per_cpu.len() as u16 + 2 + 2) + 1
    }

    /// The screen as plain text, `width` columns wide.
    pub fn to_text(&self, width: u16) -> String {
        crate::view::screen_text(width, self.height(), |area, buf| self.render(area, buf))
    }

    /// Draws the screen into `area` of `buf`.
    pub fn render(&self, area: Rect, buf: &mut Buffer) {
        let cpus = self.now.per_cpu.len() as u16 + 2 + 2;
        let [head, recorder, program, cpu_area, _, foot] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(1),
            Constraint::Length(2),
            Constraint::Length(cpus),
            Constraint::Min(0),
            Constraint::Length(1),
        ])
        .areas(area);
        headline_line(headline(&self.now)).render(head, buf);
        // Without an earlier sample there is no rate over an interval.
        let r = self.rates().unwrap_or(Rates {
            now: &self.now,
            before: Some(&self.now),
        });
        Paragraph::new(recorder_line(r)).render(recorder, buf);
        let [line, drops] = program_lines(&self.now);
        Paragraph::new(vec![line.into(), drops.into()]).render(program, buf);
        let rows = cpu_rows(r).into_iter().map(|cells| {
            let total = cells[0] == "all";
            bold_if(Row::new(right(cells)), total)
        });
        let mut widths = vec![Constraint::Length(4)];
        widths.extend([Constraint::Length(10); 2]);
        widths.extend([Constraint::Length(12); 2]);
        framed_table(
            rows,
            widths,
            &CPU_HEADER,
            " per CPU: where steered frames land ",
        )
        .render(cpu_area, buf);
        let dt = self.rates().map(|r| r.dt());
        footer(self.status.as_deref(), dt).render(foot, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rfs_live::FORMAT_VERSION;
    use crate::view::row_cells as cells;
    use steer_kernel::RfsStats;

    /// A fixed snapshot: two CPUs, counters that grow with `uptime`.
    fn sample(uptime: f64, landed: u64) -> RfsLive {
        RfsLive {
            version: FORMAT_VERSION,
            interface: "veth9".into(),
            pid: 42,
            uptime_s: uptime,
            tcp_ports: vec![7412],
            udp_ports: vec![53],
            policy: "llc".into(),
            topology: "live".into(),
            xdp_mode: "Generic".into(),
            cpus: "0-1".into(),
            flows_tracked: 3,
            counters: RfsStats {
                recorded: 100,
                recorder_new_flows: 3,
                recorder_updates: 4 * landed / 100,
                recorder_suppressed: 2 * landed / 100,
                held_back: 5,
                forced: 1,
                csum_completed: 9,
                ..Default::default()
            },
            per_cpu: vec![
                RfsCpu {
                    cpu: 0,
                    landed: 0,
                    redirected: landed,
                },
                RfsCpu {
                    cpu: 1,
                    landed,
                    redirected: 0,
                },
            ],
        }
    }

    #[test]
    fn the_report_has_the_headline_the_lines_and_every_cpu() {
        let text = report(&sample(2.0, 400));
        assert!(
            text.starts_with(
                "steer rfs on veth9 (pid 42), up 2.0s, policy llc, xdp Generic, tcp ports [7412], udp ports [53]"
            ),
            "{text}"
        );
        // Means since start: 16 updates and 8 suppressed in 2 s.
        assert!(
            text.contains("flows: 3 tracked, 3 new, 100 reads | updates 16 (8/s), suppressed by the LLC rule 8 (4/s)"),
            "{text}"
        );
        assert!(
            text.contains("5 held back (order waits), 1 forced")
                && text.contains("partial checksums: 9 completed"),
            "{text}"
        );
        assert_eq!(cells(&text, "cpu"), CPU_HEADER);
        assert_eq!(cells(&text, "0"), ["0", "0", "200", "0", "400"]);
        assert_eq!(cells(&text, "1"), ["1", "200", "0", "400", "0"]);
        assert_eq!(cells(&text, "all"), ["all", "200", "200", "400", "400"]);
    }

    #[test]
    fn the_screen_shows_rates_over_the_interval() {
        let mut view = RfsTopView::new(sample(1.0, 100));
        let text = view.to_text(132);
        // One sample: totals, no rates yet.
        assert_eq!(cells(&text, "1")[1..4], ["-", "-", "100"], "{text}");
        assert!(text.contains("rates over -"), "{text}");
        view.update(sample(3.0, 500));
        let text = view.to_text(132);
        // 400 more landed on CPU 1 in 2 s; 16 more updates, 8 suppressed.
        assert_eq!(cells(&text, "1")[1..4], ["200", "0", "500"], "{text}");
        assert_eq!(
            cells(&text, "all")[1..5],
            ["200", "200", "500", "500"],
            "{text}"
        );
        assert!(
            text.contains("updates 20 (8/s), suppressed by the LLC rule 10 (4/s)"),
            "{text}"
        );
        assert!(text.contains("per CPU"), "{text}");
        assert!(text.contains("partial checksums: 9 completed"), "{text}");
        assert!(text.contains("rates over 2.0 s"), "{text}");
        assert_eq!(text.lines().count(), view.height() as usize);
    }

    #[test]
    fn another_process_or_a_failed_refresh_shows_no_false_rates() {
        // Which snapshots rates are taken against is Samples' (view.rs);
        // here, that this view asks it and shows a failed refresh.
        let mut view = RfsTopView::new(sample(5.0, 100));
        view.status = Some("the steer rfs on veth9 is gone".into());
        let text = view.to_text(132);
        assert!(
            text.contains("not refreshed: the steer rfs on veth9 is gone"),
            "{text}"
        );
        let other = RfsLive {
            pid: view.now.pid + 1,
            ..sample(1.0, 10)
        };
        view.update(other);
        assert!(view.rates().is_none() && view.status.is_none());
    }
}
