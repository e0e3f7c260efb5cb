//! Prometheus metrics: a [`LiveStats`] in the text exposition format
//! (version 0.0.4) and the small HTTP server that serves it on `/metrics`.
//!
//! The text is written by the `prometheus` crate (a registry built per
//! scrape from the snapshot, encoded by its `TextEncoder`), never by hand.
//! Names follow node_exporter's softnet collector (`node_softnet_*` becomes
//! `steer_softnet_*`, one series per CPU with a `cpu` label), with `_total`
//! on every counter and HELP and TYPE lines on every family;
//! `docs/operations.md` maps each to the kernel's counter.
//!
//! The HTTP side answers `GET` and `HEAD` of `/metrics` (a query string is
//! ignored), 404 on any other path, 405 on any other method, 400 on a
//! request it cannot parse (with httparse) within a second. One request per
//! connection (`Connection: close`). Scrapes read the same counter blocks
//! as the stats socket: nothing on the packet path.

#[cfg(test)]
use std::io::{Read, Write};
#[cfg(test)]
use std::net::TcpStream;
use std::time::Duration;

use prometheus::{
    CounterVec, Encoder, Gauge, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use super::live::LiveStats;

/// How long the server waits for a request head and to write the reply.
const HTTP_IO_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest request head read.
const MAX_HEAD: usize = 8192;

/// The `Content-Type` of [`encode`]'s text.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Registers the families of one scrape.
struct Families {
    registry: Registry,
}

impl Families {
    fn counters(&self, name: &str, help: &str, label: &str) -> prometheus::Result<IntCounterVec> {
        let c = IntCounterVec::new(Opts::new(name, help), &[label])?;
        self.registry.register(Box::new(c.clone()))?;
        Ok(c)
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntGaugeVec> {
        let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
        self.registry.register(Box::new(g.clone()))?;
        Ok(g)
    }

    fn gauge(&self, name: &str, help: &str) -> prometheus::Result<IntGauge> {
        let g = IntGauge::new(name, help)?;
        self.registry.register(Box::new(g.clone()))?;
        Ok(g)
    }

    fn counter(&self, name: &str, help: &str) -> prometheus::Result<IntCounter> {
        let c = IntCounter::new(name, help)?;
        self.registry.register(Box::new(c.clone()))?;
        Ok(c)
    }
}

/// Per-CPU counters: name, help, value.
type CpuCounter = (
    &'static str,
    &'static str,
    fn(&super::live::CpuCounters) -> u64,
);

const PER_CPU: &[CpuCounter] = &[
    (
        "steer_softnet_received_total",
        "Frames this CPU's dispatcher took off its AF_XDP rx rings.",
        |r| r.core.rx,
    ),
    (
        "steer_softnet_processed_total",
        "Packets handed to the application's handler on this CPU, inline or from a ring (softnet_stat processed).",
        |r| r.core.processed,
    ),
    (
        "steer_softnet_dropped_total",
        "Packets dropped because this CPU's ring to the target worker was full, the backlog-full analog (softnet_stat dropped).",
        |r| r.core.dropped,
    ),
    (
        "steer_softnet_times_squeezed_total",
        "Times this CPU's worker stopped with work left because its batch budget ran out (softnet_stat time_squeeze).",
        |r| r.core.time_squeeze,
    ),
    (
        "steer_worker_sleeps_total",
        "Times this CPU's worker went to sleep until woken (a doorbell, its socket, or the sleep timeout).",
        |r| r.core.sleeps,
    ),
    (
        "steer_worker_naps_total",
        "Timer naps of this CPU's worker after work (--idle defer): polls nobody had to wake it for.",
        |r| r.core.naps,
    ),
    (
        "steer_softnet_flow_limit_count_total",
        "Packets dropped by this CPU's per-flow limit (softnet_stat flow_limit_count).",
        |r| r.core.flow_limit_drops,
    ),
    (
        "steer_softnet_fast_path_total",
        "Packets handled inline on the dispatcher's own CPU, without a ring hop.",
        |r| r.core.fast_path,
    ),
    (
        "steer_softnet_steered_in_total",
        "Packets this CPU received from other CPUs' dispatchers through rings.",
        |r| r.core.steered_in,
    ),
    (
        "steer_softnet_steered_out_total",
        "Packets this CPU's dispatcher sent to other CPUs through rings.",
        |r| r.core.steered_out,
    ),
    (
        "steer_softnet_queued_local_total",
        "Packets this CPU's dispatcher queued to its own CPU's ring (fast path off, or earlier packets of the flow still queued).",
        |r| r.core.queued_local,
    ),
    (
        "steer_softnet_held_back_total",
        "Flow moves held back until the old CPU passed the flow's last queued packet (last_qtail).",
        |r| r.core.held_back,
    ),
    (
        "steer_softnet_malformed_total",
        "Frames that failed to parse, counted and not steered by flow.",
        |r| r.core.malformed,
    ),
    (
        "steer_softnet_no_flow_total",
        "Frames without a flow (not IP), steered by the fallback rule.",
        |r| r.core.no_flow,
    ),
    (
        "steer_steering_updates_total",
        "Flow moves to another CPU that called the steering hook (the ndo_rx_flow_steer analog), by dispatching CPU.",
        |r| r.core.hook_calls,
    ),
    (
        "steer_steering_update_errors_total",
        "Steering-hook calls that failed, by dispatching CPU.",
        |r| r.core.hook_errors,
    ),
    (
        "steer_tx_packets_total",
        "Replies this CPU's worker put on its tx ring.",
        |r| r.tx,
    ),
    (
        "steer_tx_dropped_total",
        "Replies this CPU's worker recycled because the tx ring stayed full.",
        |r| r.tx_dropped,
    ),
    (
        "steer_handler_consumed_total",
        "Packets the handler on this CPU consumed without a reply.",
        |r| r.consumed,
    ),
    (
        "steer_handler_dropped_total",
        "Packets the handler on this CPU refused.",
        |r| r.app_dropped,
    ),
];

/// Per-socket counters: name, help, value.
type SocketCounter = (
    &'static str,
    &'static str,
    fn(&super::live::SocketCounters) -> u64,
);

const PER_SOCKET: &[SocketCounter] = &[
    (
        "steer_xsk_rx_packets_total",
        "Frames taken off this rx queue's AF_XDP rx ring.",
        |s| s.rx_packets,
    ),
    (
        "steer_xsk_tx_packets_total",
        "Transmissions completed on this queue's AF_XDP socket.",
        |s| s.tx_packets,
    ),
    (
        "steer_xsk_wakeups_total",
        "Wakeup system calls on this queue's AF_XDP socket (tx kicks, fill-ring wakeups).",
        |s| s.wakeups,
    ),
    (
        "steer_xsk_multi_rx_packets_total",
        "Multi-buffer packets (spanning several UMEM frames) received on this queue's AF_XDP socket.",
        |s| s.multi_rx_packets,
    ),
    (
        "steer_xsk_multi_tx_packets_total",
        "Multi-buffer packets put on this queue's AF_XDP tx ring as chains of frames.",
        |s| s.multi_tx_packets,
    ),
    (
        "steer_xsk_multi_refused_total",
        "Multi-buffer packets refused on this queue (too many frames, no frames for a reply, no tx ring room for the chain).",
        |s| s.multi_refused,
    ),
    (
        "steer_xsk_rx_dropped_total",
        "XDP_STATISTICS rx_dropped: frames the kernel dropped for reasons other than invalid descriptors.",
        |s| s.rx_dropped,
    ),
    (
        "steer_xsk_rx_invalid_descs_total",
        "XDP_STATISTICS rx_invalid_descs: frames dropped because of invalid descriptors.",
        |s| s.rx_invalid_descs,
    ),
    (
        "steer_xsk_rx_ring_full_total",
        "XDP_STATISTICS rx_ring_full: frames dropped because the rx ring was full.",
        |s| s.rx_ring_full,
    ),
    (
        "steer_xsk_rx_fill_ring_empty_descs_total",
        "XDP_STATISTICS rx_fill_ring_empty_descs: times a frame arrived and the fill ring was empty.",
        |s| s.rx_fill_ring_empty_descs,
    ),
    (
        "steer_xsk_tx_invalid_descs_total",
        "XDP_STATISTICS tx_invalid_descs: invalid descriptors on the tx ring.",
        |s| s.tx_invalid_descs,
    ),
    (
        "steer_xsk_tx_ring_empty_descs_total",
        "XDP_STATISTICS tx_ring_empty_descs: times the kernel found the tx ring empty.",
        |s| s.tx_ring_empty_descs,
    ),
];

/// The registry of one scrape of `live`.
/// Whether each worker runs, its restarts, and how many died.
fn workers(f: &Families, workers: &[super::live::WorkerStatus]) -> prometheus::Result<()> {
    if workers.is_empty() {
        return Ok(());
    }
    let up = f.gauges(
        "steer_worker_up",
        "1 while this CPU's worker runs; 0 once its handler panicked past its restart limit (its queues and flows moved to the others).",
        &["cpu"],
    )?;
    for w in workers {
        up.with_label_values(&[w.cpu.to_string().as_str()])
            .set(i64::from(w.up));
    }
    let restarts = f.counters(
        "steer_worker_restarts_total",
        "Times this CPU's worker was restarted in place after its handler panicked (each loses the packet it panicked on).",
        "cpu",
    )?;
    for w in workers {
        restarts
            .with_label_values(&[w.cpu.to_string().as_str()])
            .inc_by(u64::from(w.restarts));
    }
    let deaths = f.counter(
        "steer_worker_deaths_total",
        "Workers given up since the engine started (their handler panicked past the restart limit).",
    )?;
    deaths.inc_by(
        workers
            .iter()
            .filter(|w| !w.up && w.panic.is_some())
            .count() as u64,
    );
    Ok(())
}

fn registry(live: &LiveStats) -> prometheus::Result<Registry> {
    let f = Families {
        registry: Registry::new(),
    };
    for (name, help, value) in PER_CPU {
        let family = f.counters(name, help, "cpu")?;
        for row in &live.per_cpu {
            family
                .with_label_values(&[row.cpu.to_string().as_str()])
                .inc_by(value(row));
        }
    }
    for (name, help, value) in PER_SOCKET {
        let family = f.counters(name, help, "queue")?;
        for s in &live.sockets {
            family
                .with_label_values(&[s.queue.to_string().as_str()])
                .inc_by(value(s));
        }
    }
    let busy = CounterVec::new(
        Opts::new(
            "steer_worker_busy_seconds_total",
            "Seconds this CPU's worker spent in rounds that did work (poll, dispatch, handle): the load the balancer reads.",
        ),
        &["cpu"],
    )?;
    f.registry.register(Box::new(busy.clone()))?;
    for row in &live.per_cpu {
        busy.with_label_values(&[row.cpu.to_string().as_str()])
            .inc_by(row.core.busy_ns as f64 / 1e9);
    }
    balancer(&f, &live.balance)?;
    if let Some(flows) = &live.flows {
        flow_budget(&f, flows)?;
    }
    workers(&f, &live.workers)?;
    slow_path(&f, &live.slow_path)?;
    let updates = f.counters(
        "steer_desired_table_updates_total",
        "Desired-CPU table writes by reason (rps_record_sock_flow analog); each may move a flow and call the steering hook.",
        "reason",
    )?;
    for r in steer_core::policy::WriteReason::ALL {
        updates
            .with_label_values(&[r.name()])
            .inc_by(live.desired.updates.get(r.name()).copied().unwrap_or(0));
    }
    let suppressed = f.counters(
        "steer_desired_table_suppressed_total",
        "Same-flow CPU changes the update rule did not write, by reason: same_llc (old and new CPU share a last-level cache and the old one is online and allowed; policy llc).",
        "reason",
    )?;
    suppressed
        .with_label_values(&["same_llc"])
        .inc_by(live.desired.suppressed);
    let frames = f.gauges(
        "steer_umem_frames",
        "UMEM frames by place: free pools, fill rings, kernel rx, rx rings, held by steer, tx rings, kernel tx, completion rings.",
        &["place"],
    )?;
    for (place, n) in live.frames.places() {
        frames.with_label_values(&[place]).set(n);
    }
    f.gauge(
        "steer_umem_frames_in_use",
        "UMEM frames not idle: all but those in free pools or posted empty on fill rings.",
    )?
    .set(live.frames.in_use());
    f.gauge(
        "steer_umem_frames_capacity",
        "UMEM frames in use by the engine in all.",
    )?
    .set(live.frames.total);
    f.gauges(
        "steer_engine_info",
        "The engine: interface, update policy, fast path, XDP attach and AF_XDP bind modes; always 1.",
        &["interface", "policy", "fast_path", "xdp_mode", "bind_mode"],
    )?
    .with_label_values(&[
        live.interface.as_str(),
        live.policy.as_str(),
        if live.fast_path { "on" } else { "off" },
        live.xdp_mode.as_str(),
        live.bind_mode.as_str(),
    ])
    .set(1);
    let uptime = Gauge::new(
        "steer_engine_uptime_seconds",
        "Seconds since the engine started.",
    )?;
    f.registry.register(Box::new(uptime.clone()))?;
    uptime.set(live.uptime_s);
    Ok(f.registry)
}

/// Flow delivery's budget families (engines that deliver flows).
fn flow_budget(f: &Families, h: &super::live::HubStats) -> prometheus::Result<()> {
    let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    f.gauge(
        "steer_flows_open",
        "Flows open now (delivered to the application, not yet closed or evicted).",
    )?
    .set(gauge(h.open));
    f.gauge(
        "steer_flows_max",
        "The flow budget: the most flows open at once.",
    )?
    .set(gauge(h.max_flows));
    f.counter(
        "steer_flows_accepted_total",
        "New flows admitted and offered to a listener.",
    )?
    .inc_by(h.accepted);
    let refused = f.counters(
        "steer_flows_refused_total",
        "New flows refused, by reason: gate (first datagrams dropped in XDP while the budget is full), budget (full of recently active flows, or evictions over their pace), rate_limit (the source was over its new-flow rate), backlog (the listener's backlog was full), overload (max_starting new flows already wait for their first read, or new flows waited too long to be read: the application is falling behind).",
        "reason",
    )?;
    refused.with_label_values(&["gate"]).inc_by(h.gate_dropped);
    refused.with_label_values(&["budget"]).inc_by(h.refused);
    refused
        .with_label_values(&["rate_limit"])
        .inc_by(h.rate_limited);
    refused
        .with_label_values(&["backlog"])
        .inc_by(h.accept_drops);
    refused.with_label_values(&["overload"]).inc_by(h.overload);
    f.gauge(
        "steer_flows_gate_closed",
        "1 while the XDP new-flow gate is closed (the budget is full: new flows' first datagrams drop in XDP, retries pass).",
    )?
    .set(i64::from(h.gate_closed));
    f.counter(
        "steer_flows_gate_retries_total",
        "Retries of new flows let through the closed XDP gate.",
    )?
    .inc_by(h.gate_retries);
    let evicted = f.counters(
        "steer_flows_evicted_total",
        "Flows evicted to make room for new ones, by reason: unassured (no datagram after a reply: probes, sprays) or idle (the least recently active assured flow).",
        "reason",
    )?;
    evicted
        .with_label_values(&["unassured"])
        .inc_by(h.evicted_unassured);
    evicted.with_label_values(&["idle"]).inc_by(h.evicted_idle);
    f.counter(
        "steer_flows_backend_errors_total",
        "Per-flow resources the application could not get or use (a proxy's backend socket).",
    )?
    .inc_by(h.backend_errors);
    Ok(())
}

/// The slow path's families: fragmented datagrams the kernel reassembled,
/// answered through the engine's kernel sockets.
fn slow_path(f: &Families, s: &super::live::SlowPathStats) -> prometheus::Result<()> {
    let datagrams = f.counters(
        "steer_slow_path_datagrams_total",
        "Datagrams on the slow path (reassembled by the kernel from fragments, read from the engine's kernel socket on an owned UDP port), by outcome: received, answered, consumed, refused (by the handler, or its reply was no datagram from an owned port), too_large, queue_full (the flow's worker had no room, or no worker was left), send_failed, left_at_stop (still queued for a worker when the engine stopped).",
        "outcome",
    )?;
    for (outcome, n) in [
        ("received", s.received),
        ("answered", s.answered),
        ("consumed", s.consumed),
        ("refused", s.refused),
        ("too_large", s.too_large),
        ("queue_full", s.queue_full),
        ("send_failed", s.send_failed),
        ("left_at_stop", s.left_at_stop),
    ] {
        datagrams.with_label_values(&[outcome]).inc_by(n);
    }
    let bytes = f.counters(
        "steer_slow_path_bytes_total",
        "Payload bytes on the slow path, by direction: received (datagrams read) or answered (replies sent).",
        "direction",
    )?;
    bytes
        .with_label_values(&["received"])
        .inc_by(s.received_bytes);
    bytes
        .with_label_values(&["answered"])
        .inc_by(s.answered_bytes);
    let sockets = f.gauges(
        "steer_slow_path_sockets",
        "The slow path's kernel sockets (an IPv4 and an IPv6 one per owned UDP port), by state: bound, or failed (the port is another process's: its fragmented datagrams are not answered).",
        &["state"],
    )?;
    let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    sockets.with_label_values(&["bound"]).set(gauge(s.sockets));
    sockets
        .with_label_values(&["failed"])
        .set(gauge(s.bind_failed));
    Ok(())
}

/// The load balancer's families.
fn balancer(f: &Families, b: &steer_core::balance::BalanceStats) -> prometheus::Result<()> {
    f.gauge(
        "steer_balancer_enabled",
        "Whether the load balancer is on (1) or off (0).",
    )?
    .set(i64::from(b.on));
    f.counter(
        "steer_balancer_rounds_total",
        "Rounds the load balancer ran while on.",
    )?
    .inc_by(b.rounds);
    let moves = f.counters(
        "steer_balancer_moves_total",
        "Flow buckets the load balancer moved off an overloaded worker, by reason: same_llc (to a worker behind the same LLC) or cross_llc.",
        "reason",
    )?;
    for r in steer_core::balance::MoveReason::ALL {
        moves.with_label_values(&[r.name()]).inc_by(b.moves_for(r));
    }
    f.counter(
        "steer_balancer_released_total",
        "Balancer assignments dropped (their CPU went away, their flows went idle, or the balancer was switched off).",
    )?
    .inc_by(b.released);
    f.gauge(
        "steer_balancer_elephants",
        "Flow buckets the last round left in place because alone they carry at least a worker's fair share.",
    )?
    .set(i64::try_from(b.elephants).unwrap_or(i64::MAX));
    f.counter(
        "steer_balancer_elephant_rounds_total",
        "Balancer rounds that found at least one elephant.",
    )?
    .inc_by(b.elephant_rounds);
    Ok(())
}

/// `live` in the Prometheus text exposition format.
///
/// ```
/// use steer_engine::observe::{metrics, CpuCounters, LiveStats};
/// let mut live = LiveStats::empty("eth1");
/// let mut row = CpuCounters { cpu: 1, ..Default::default() };
/// row.core.processed = 42;
/// live.per_cpu.push(row);
/// let text = metrics::encode(&live).unwrap();
/// assert!(text.contains("# TYPE steer_softnet_processed_total counter"));
/// assert!(text.contains("steer_softnet_processed_total{cpu=\"1\"} 42"));
/// ```
pub fn encode(live: &LiveStats) -> prometheus::Result<String> {
    let families = registry(live)?.gather();
    let mut out = Vec::new();
    TextEncoder::new().encode(&families, &mut out)?;
    String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
}

/// The response to what a client has sent so far (`closed`: it will send
/// no more): `None` while its request head may still be coming. Never
/// panics on what the client sends.
pub(crate) fn reply_to(
    received: &[u8],
    closed: bool,
    render: &dyn Fn() -> prometheus::Result<String>,
) -> Option<Vec<u8>> {
    let complete =
        received.windows(4).any(|w| w == b"\r\n\r\n") || received.windows(2).any(|w| w == b"\n\n");
    let response = if complete {
        respond(received, render)
    } else if received.len() > MAX_HEAD {
        Response::plain(
            400,
            "Bad Request",
            &format!("request head longer than {MAX_HEAD} bytes\n"),
        )
    } else if closed {
        Response::plain(
            400,
            "Bad Request",
            "connection closed before the request ended\n",
        )
    } else {
        return None;
    };
    Some(response.bytes())
}

/// The response to a client that sent no whole request in its time.
pub(crate) fn timeout_reply() -> Vec<u8> {
    Response::plain(
        400,
        "Bad Request",
        &format!(
            "no complete request within {} s\n",
            HTTP_IO_TIMEOUT.as_secs()
        ),
    )
    .bytes()
}

/// Answers one connection, blocking (the tests' server; the observer
/// serves many at once without blocking, in `server`).
#[cfg(test)]
pub(crate) fn serve(mut stream: TcpStream, snapshot: &dyn Fn() -> LiveStats) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(HTTP_IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(HTTP_IO_TIMEOUT));
    super::server::serve_blocking(&mut stream, super::Kind::Metrics, &|| snapshot());
}

/// An HTTP/1.1 response.
#[derive(Debug)]
struct Response {
    status: u16,
    reason: &'static str,
    content_type: &'static str,
    extra: &'static str,
    body: Vec<u8>,
    head_only: bool,
}

impl Response {
    fn plain(status: u16, reason: &'static str, body: &str) -> Self {
        Self {
            status,
            reason,
            content_type: "text/plain; charset=utf-8",
            extra: "",
            body: body.as_bytes().to_vec(),
            head_only: false,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
            self.status,
            self.reason,
            self.content_type,
            self.body.len(),
            self.extra,
        )
        .into_bytes();
        if !self.head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// The response to a complete request head.
fn respond(head: &[u8], render: &dyn Fn() -> prometheus::Result<String>) -> Response {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => {
            return Response::plain(400, "Bad Request", "incomplete request\n")
        }
        Err(e) => return Response::plain(400, "Bad Request", &format!("{e}\n")),
    }
    let method = request.method.unwrap_or("");
    let path = request.path.unwrap_or("");
    let path = path.split('?').next().unwrap_or("");
    if path != "/metrics" {
        return Response::plain(404, "Not Found", "not found: steer serves /metrics\n");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => {
            let mut r = Response::plain(405, "Method Not Allowed", "use GET\n");
            r.extra = "Allow: GET, HEAD\r\n";
            return r;
        }
    };
    match render() {
        Ok(text) => Response {
            status: 200,
            reason: "OK",
            content_type: CONTENT_TYPE,
            extra: "",
            body: text.into_bytes(),
            head_only,
        },
        Err(e) => Response::plain(
            500,
            "Internal Server Error",
            &format!("encoding the metrics: {e}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::live::{CpuCounters, SocketCounters};
    use super::*;

    fn sample() -> LiveStats {
        let mut live = LiveStats::empty("veth0");
        for cpu in 0..2 {
            let mut row = CpuCounters {
                cpu,
                tx: 10 + cpu as u64,
                ..Default::default()
            };
            row.core.processed = 100 + cpu as u64;
            row.core.time_squeeze = 3;
            row.core.busy_ns = 1_500_000_000;
            live.per_cpu.push(row);
        }
        live.sockets.push(SocketCounters {
            queue: 1,
            rx_ring_full: 7,
            ..Default::default()
        });
        live.desired.updates.insert("cross_llc".into(), 5);
        live.desired.suppressed = 9;
        live.frames.total = 64;
        live.frames.free = 60;
        live.frames.held = 4;
        live.balance.on = true;
        live.balance.moves_same_llc = 6;
        live.balance.elephants = 1;
        live.workers = vec![
            super::super::live::WorkerStatus {
                cpu: 0,
                up: true,
                panic: Some("bang".into()),
                restarts: 2,
            },
            super::super::live::WorkerStatus {
                cpu: 1,
                up: false,
                panic: Some("boom".into()),
                restarts: 5,
            },
        ];
        live.flows = Some(super::super::live::HubStats {
            open: 900,
            max_flows: 920,
            refused: 2,
            rate_limited: 40,
            evicted_unassured: 7000,
            backend_errors: 1,
            overload: 3,
            gate_closed: true,
            gate_dropped: 90000,
            gate_retries: 12,
            ..Default::default()
        });
        live.slow_path.sockets = 2;
        live.slow_path.received = 4;
        live.slow_path.received_bytes = 12000;
        live.slow_path.answered = 3;
        live.slow_path.queue_full = 1;
        live
    }

    #[test]
    fn every_family_has_help_and_type_and_the_values() {
        let text = encode(&sample()).unwrap();
        for line in [
            "steer_softnet_processed_total{cpu=\"0\"} 100",
            "steer_softnet_processed_total{cpu=\"1\"} 101",
            "steer_softnet_times_squeezed_total{cpu=\"1\"} 3",
            "steer_tx_packets_total{cpu=\"1\"} 11",
            "steer_xsk_rx_ring_full_total{queue=\"1\"} 7",
            "steer_desired_table_updates_total{reason=\"cross_llc\"} 5",
            "steer_desired_table_updates_total{reason=\"changed\"} 0",
            "steer_desired_table_suppressed_total{reason=\"same_llc\"} 9",
            "steer_umem_frames{place=\"held\"} 4",
            "steer_umem_frames_in_use 4",
            "steer_worker_busy_seconds_total{cpu=\"1\"} 1.5",
            "steer_balancer_enabled 1",
            "steer_balancer_moves_total{reason=\"same_llc\"} 6",
            "steer_balancer_moves_total{reason=\"cross_llc\"} 0",
            "steer_balancer_elephants 1",
            "steer_worker_up{cpu=\"0\"} 1",
            "steer_worker_up{cpu=\"1\"} 0",
            "steer_worker_deaths_total 1",
            "steer_worker_restarts_total{cpu=\"0\"} 2",
            "steer_worker_restarts_total{cpu=\"1\"} 5",
            "steer_flows_open 900",
            "steer_flows_max 920",
            "steer_flows_refused_total{reason=\"rate_limit\"} 40",
            "steer_flows_refused_total{reason=\"budget\"} 2",
            "steer_flows_refused_total{reason=\"gate\"} 90000",
            "steer_flows_refused_total{reason=\"overload\"} 3",
            "steer_flows_gate_closed 1",
            "steer_flows_gate_retries_total 12",
            "steer_flows_evicted_total{reason=\"unassured\"} 7000",
            "steer_flows_evicted_total{reason=\"idle\"} 0",
            "steer_flows_backend_errors_total 1",
            "steer_slow_path_datagrams_total{outcome=\"received\"} 4",
            "steer_slow_path_datagrams_total{outcome=\"answered\"} 3",
            "steer_slow_path_datagrams_total{outcome=\"queue_full\"} 1",
            "steer_slow_path_bytes_total{direction=\"received\"} 12000",
            "steer_slow_path_sockets{state=\"bound\"} 2",
            "steer_slow_path_sockets{state=\"failed\"} 0",
            "# TYPE steer_balancer_rounds_total counter",
            "# TYPE steer_softnet_dropped_total counter",
            "# TYPE steer_umem_frames gauge",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        let families: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        let helps = text.lines().filter(|l| l.starts_with("# HELP ")).count();
        assert_eq!(families.len(), helps);
        assert!(families.len() >= PER_CPU.len() + PER_SOCKET.len() + 5);
    }

    fn http(request: &[u8]) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            serve(s, &sample);
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(request).unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).unwrap();
        server.join().unwrap();
        reply
    }

    #[test]
    fn http_serves_metrics_and_refuses_the_rest() {
        let ok = http(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains("Content-Type: text/plain; version=0.0.4"),
            "{ok}"
        );
        assert!(ok.contains("steer_softnet_processed_total{cpu=\"0\"} 100"));
        let head = http(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(
            head.starts_with("HTTP/1.1 200 OK\r\n") && !head.contains("steer_"),
            "{head}"
        );
        assert!(http(b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        let post = http(b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert!(
            post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET, HEAD"),
            "{post}"
        );
        assert!(http(b"\x00\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
        assert!(http(b"GET /metrics HTTP/1.1\r\n").starts_with("HTTP/1.1 400"));
    }

    proptest::proptest! {
        /// Whatever a client sends, the server answers once the request is
        /// whole or the client is done, with one HTTP response, and never
        /// panics.
        #[test]
        fn any_request_bytes_get_one_response(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let reply = reply_to(&bytes, true, &|| encode(&sample())).expect("a closed client gets an answer");
            proptest::prop_assert!(reply.starts_with(b"HTTP/1.1 "));
        }
    }
}
