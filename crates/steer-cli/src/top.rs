//! `steer top <interface>`: the running engine's per-CPU table refreshed in
//! the terminal, like `top` for softirqs: rates and totals per CPU, the
//! steering updates and suppressed changes, the kernel's statistics of each
//! AF_XDP socket and where the UMEM frames are. Drawn with ratatui
//! (crossterm backend); `q`, Esc or Ctrl-C quits. An engine that goes away
//! leaves its last numbers on screen with the reason in red, and the view
//! comes back when an engine serves the interface again.
//!
//! A `steer rfs` on the interface gets its own screen (`rfs_view`): where
//! steered frames land per CPU, the recorder's updates and suppressed
//! changes per second, order waits and forced moves.
//!
//! `--once` takes two samples one interval apart and prints the same screen
//! as plain text (no terminal needed), for scripts and tests.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::Args;
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::widgets::{Paragraph, Row, Table, Widget};
use steer_engine::observe::{CpuCounters, LiveStats, SocketCounters};

use crate::rfs_view::RfsTopView;
use crate::stats::{flows_line, frames_line, headline, steering_line, EngineRef, Running};
use crate::view::{bold_if, framed_table, right, screen_text, Samples};

/// `steer top` arguments.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    steer top eth1                   refresh once a second; q quits\n  \
    steer top eth1 --once            one screen as plain text (rates over one interval)")]
pub struct TopArgs {
    #[command(flatten)]
    pub engine: EngineRef,
    /// Seconds between refreshes (and between the two samples of `--once`).
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, value_parser = crate::args::positive_seconds)]
    pub interval: f64,
    /// Print one screen as plain text and exit (no terminal needed).
    #[arg(long)]
    pub once: bool,
    /// Width of the `--once` screen.
    #[arg(long, default_value_t = 132)]
    pub width: u16,
}

pub fn run(args: &TopArgs) -> anyhow::Result<()> {
    let interval = Duration::from_secs_f64(args.interval.clamp(0.05, 3600.0));
    let first = args.engine.read_any()?;
    let mut view = Screen::new(first);
    if args.once {
        std::thread::sleep(interval);
        view.update(args.engine.read_any()?);
        print!("{}", view.to_text(args.width));
        return Ok(());
    }
    if !std::io::stdout().is_terminal() {
        anyhow::bail!(
            "stdout is not a terminal: use `steer top {} --once` for one screen as text",
            args.engine.interface
        );
    }
    let mut terminal = ratatui::try_init()?;
    let result = (|| -> anyhow::Result<()> {
        let mut next = Instant::now() + interval;
        loop {
            terminal.draw(|f| view.render(f.area(), f.buffer_mut()))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(key) = event::read()? {
                    if key.kind == KeyEventKind::Press && quits(key) {
                        return Ok(());
                    }
                }
                // A resize or another key: draw again, keep the schedule.
                continue;
            }
            next = Instant::now() + interval;
            match args.engine.read_any() {
                Ok(running) => view.update(running),
                Err(e) => view.set_status(format!("{e:#}")),
            }
        }
    })();
    ratatui::restore();
    result
}

fn quits(key: KeyEvent) -> bool {
    matches!(key.code, KeyCode::Char('q') | KeyCode::Esc)
        || (key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL))
}

/// The screen of what runs on the interface: an engine's, or `steer
/// rfs`'s ([`RfsTopView`]); a process of the other kind taking over the
/// interface switches the screen.
#[derive(Debug)]
enum Screen {
    Engine(Box<TopView>),
    Rfs(Box<RfsTopView>),
}

impl Screen {
    fn new(running: Running) -> Self {
        match running {
            Running::Engine(live) => Self::Engine(Box::new(TopView::new(*live))),
            Running::Rfs { live, .. } => Self::Rfs(Box::new(RfsTopView::new(*live))),
        }
    }

    /// A new sample: rates against the previous one of the same kind.
    fn update(&mut self, running: Running) {
        match (&mut *self, running) {
            (Self::Engine(view), Running::Engine(live)) => view.update(*live),
            (Self::Rfs(view), Running::Rfs { live, .. }) => view.update(*live),
            (_, other) => *self = Self::new(other),
        }
    }

    /// Why the latest refresh failed.
    fn set_status(&mut self, status: String) {
        match self {
            Self::Engine(view) => view.status = Some(status),
            Self::Rfs(view) => view.status = Some(status),
        }
    }

    fn render(&self, area: Rect, buf: &mut Buffer) {
        match self {
            Self::Engine(view) => view.render(area, buf),
            Self::Rfs(view) => view.render(area, buf),
        }
    }

    fn to_text(&self, width: u16) -> String {
        match self {
            Self::Engine(view) => view.to_text(width),
            Self::Rfs(view) => view.to_text(width),
        }
    }
}

/// The engine's screen (the drawing is below; the samples are
/// [`Samples`]).
pub type TopView = Samples<LiveStats>;

impl TopView {
    /// Seconds between the two samples.
    fn dt(&self) -> Option<f64> {
        self.before.as_ref().map(|b| self.now.uptime_s - b.uptime_s)
    }

    /// `now - before` per second, or `-`.
    fn rate(&self, now: u64, before: Option<u64>) -> String {
        crate::view::rate(now, before, self.dt().unwrap_or(0.0))
    }

    fn cpu_before(&self, cpu: Option<usize>) -> Option<CpuCounters> {
        let b = self.before.as_ref()?;
        match cpu {
            Some(c) => b.per_cpu.iter().find(|r| r.cpu == c).copied(),
            None => Some(b.total()),
        }
    }

    fn socket_before(&self, queue: u32) -> Option<SocketCounters> {
        let b = self.before.as_ref()?;
        b.sockets.iter().find(|s| s.queue == queue).copied()
    }

    /// Lines the screen needs.
    pub fn height(&self) -> u16 {
        let cpus = self.now.per_cpu.len() as u16 + 2; // header + all
        let sockets = self.now.sockets.len() as u16 + 1;
        1 + (cpus + 2) + 1 + (sockets + 2) + 1 + 1 + u16::from(self.now.flows.is_some())
    }

    /// Draws the screen into `area` of `buf`.
    pub fn render(&self, area: Rect, buf: &mut Buffer) {
        let cpus = self.now.per_cpu.len() as u16 + 2 + 2;
        let sockets = self.now.sockets.len() as u16 + 1 + 2;
        let flows = u16::from(self.now.flows.is_some());
        let [head, cpu_area, steering, socket_area, frames, flow_area, _, foot] =
            Layout::vertical([
                Constraint::Length(1),
                Constraint::Length(cpus),
                Constraint::Length(1),
                Constraint::Length(sockets),
                Constraint::Length(1),
                Constraint::Length(flows),
                Constraint::Min(0),
                Constraint::Length(1),
            ])
            .areas(area);
        crate::view::headline_line(headline(&self.now)).render(head, buf);
        self.cpu_table().render(cpu_area, buf);
        Paragraph::new(steering_line(&self.now)).render(steering, buf);
        self.socket_table().render(socket_area, buf);
        Paragraph::new(frames_line(&self.now)).render(frames, buf);
        if let Some(line) = flows_line(&self.now) {
            Paragraph::new(line).render(flow_area, buf);
        }
        crate::view::footer(self.status.as_deref(), self.dt()).render(foot, buf);
    }

    fn cpu_table(&self) -> Table<'static> {
        let header = [
            "cpu",
            "rx/s",
            "tx/s",
            "rx",
            "tx",
            "fast",
            "st_in",
            "st_out",
            "ring_drop",
            "flow_lim",
            "updates",
            "squeeze",
        ];
        let total = self.now.total();
        let rows = self
            .now
            .per_cpu
            .iter()
            .map(|r| (Some(r.cpu), *r))
            .chain(std::iter::once((None, total)))
            .map(|(cpu, r)| {
                let b = self.cpu_before(cpu);
                let row = Row::new(right([
                    cpu.map_or("all".to_string(), |c| c.to_string()),
                    self.rate(r.core.rx, b.map(|b| b.core.rx)),
                    self.rate(r.tx, b.map(|b| b.tx)),
                    r.core.rx.to_string(),
                    r.tx.to_string(),
                    r.core.fast_path.to_string(),
                    r.core.steered_in.to_string(),
                    r.core.steered_out.to_string(),
                    r.core.dropped.to_string(),
                    r.core.flow_limit_drops.to_string(),
                    r.core.hook_calls.to_string(),
                    r.core.time_squeeze.to_string(),
                ]));
                bold_if(row, cpu.is_none())
            });
        let mut widths = vec![Constraint::Length(4)];
        widths.extend([Constraint::Length(9); 2]);
        widths.extend([Constraint::Length(10); 9]);
        framed_table(rows, widths, &header, " per CPU ")
    }

    fn socket_table(&self) -> Table<'static> {
        let header = [
            "queue",
            "rx/s",
            "rx_dropped",
            "rx_ring_full",
            "fill_empty",
            "tx_ring_empty",
            "invalid",
            "fill",
            "rx_ring",
            "tx_ring",
            "completion",
        ];
        let rows = self.now.sockets.iter().map(|s| {
            let b = self.socket_before(s.queue);
            Row::new(right([
                s.queue.to_string(),
                self.rate(s.rx_packets, b.map(|b| b.rx_packets)),
                s.rx_dropped.to_string(),
                s.rx_ring_full.to_string(),
                s.rx_fill_ring_empty_descs.to_string(),
                s.tx_ring_empty_descs.to_string(),
                (s.rx_invalid_descs + s.tx_invalid_descs).to_string(),
                s.fill_ring.to_string(),
                s.rx_ring.to_string(),
                s.tx_ring.to_string(),
                s.completion.to_string(),
            ]))
        });
        let mut widths = vec![Constraint::Length(5), Constraint::Length(9)];
        widths.extend([Constraint::Length(13); 5]);
        widths.extend([Constraint::Length(10); 4]);
        framed_table(
            rows,
            widths,
            &header,
            " AF_XDP sockets (kernel XDP_STATISTICS, ring occupancy) ",
        )
    }

    /// The screen as plain text, `width` columns wide.
    pub fn to_text(&self, width: u16) -> String {
        screen_text(width, self.height(), |area, buf| self.render(area, buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(uptime: f64, rx: u64) -> LiveStats {
        let mut live = LiveStats::empty("eth9");
        live.uptime_s = uptime;
        for cpu in 0..2 {
            let mut r = CpuCounters {
                cpu,
                ..Default::default()
            };
            r.core.rx = rx;
            live.per_cpu.push(r);
        }
        live.sockets.push(SocketCounters {
            queue: 0,
            rx_packets: rx,
            ..Default::default()
        });
        live
    }

    #[test]
    fn the_screen_shows_rates_totals_and_sockets() {
        let mut view = TopView::new(sample(1.0, 100));
        view.update(sample(3.0, 300));
        let text = view.to_text(132);
        let cells = |label: &str| crate::view::row_cells(&text, label);
        // 200 more in 2 s on each CPU.
        assert_eq!(cells("1")[1..4], ["100", "0", "300"], "{text}");
        assert_eq!(cells("all")[1..4], ["200", "0", "600"], "{text}");
        assert!(text.contains("per CPU"), "{text}");
        assert!(text.contains("AF_XDP sockets"), "{text}");
        assert!(text.contains("rates over 2.0 s"), "{text}");
        assert_eq!(text.lines().count(), view.height() as usize);
    }

    #[test]
    fn a_proxy_engine_shows_its_flow_budget() {
        let mut live = sample(1.0, 100);
        live.flows = Some(steer_engine::flows::HubStats {
            open: 917,
            max_flows: 920,
            rate_limited: 4000,
            evicted_unassured: 12_000,
            ..Default::default()
        });
        let view = TopView::new(live);
        let text = view.to_text(200);
        assert!(
            text.contains("flows: 917 open of 920")
                && text.contains("rate limit 4000")
                && text.contains("unassured 12000"),
            "{text}"
        );
        assert_eq!(text.lines().count(), view.height() as usize);
    }

    /// A `steer rfs` taking over from an engine gets its screen, and the
    /// other way round; a sample of the same kind keeps the screen.
    #[test]
    fn the_screen_follows_the_kind_of_process() {
        let rfs = || Running::Rfs {
            live: Box::new(crate::rfs_live::RfsLive {
                interface: "eth9".into(),
                ..Default::default()
            }),
            json: serde_json::Value::Null,
        };
        let mut screen = Screen::new(Running::Engine(Box::new(sample(1.0, 100))));
        assert!(screen.to_text(132).starts_with("steer on eth9"));
        screen.update(rfs());
        assert!(matches!(screen, Screen::Rfs(_)));
        screen.update(rfs());
        screen.set_status("gone".into());
        let text = screen.to_text(132);
        assert!(text.starts_with("steer rfs on eth9"), "{text}");
        assert!(text.contains("not refreshed: gone"), "{text}");
        screen.update(Running::Engine(Box::new(sample(2.0, 200))));
        assert!(matches!(screen, Screen::Engine(_)));
    }

    #[test]
    fn a_new_engine_or_a_failed_refresh_shows_no_false_rates() {
        let mut view = TopView::new(sample(5.0, 100));
        let mut other = sample(1.0, 10);
        other.pid += 1;
        view.update(other);
        assert!(view.dt().is_none());
        view.status = Some("the steer engine on eth9 is gone".into());
        let text = view.to_text(132);
        assert!(
            text.contains("not refreshed: the steer engine on eth9 is gone"),
            "{text}"
        );
    }
}
