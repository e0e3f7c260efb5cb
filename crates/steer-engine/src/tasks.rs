//! Tasks on the engine's own workers ("thread-per-core"): each worker
//! thread owns a tokio current_thread runtime and a `LocalSet` and runs the
//! application's tasks between its rounds, so a datagram goes from the
//! AF_XDP ring to the task that reads it without a thread hop.
//!
//! - Built up front ([`WorkerTasks::new`]: everything that can fail, the
//!   runtime and the registration of the worker's AF_XDP sockets with its
//!   event loop) and installed on the worker thread by the worker's sleeper
//!   ([`WorkerTasks::install`]) as a thread-local: a `LocalSet` is `!Send`.
//! - Asleep ([`TaskSleeper`]): the runtime runs the ready tasks and waits in
//!   its event loop (one `epoll_wait` for the worker's AF_XDP sockets, the
//!   tasks' own sockets and timers, and the doorbell) until one of the
//!   worker's sockets is readable, the doorbell rings or the timeout passes.
//!   Tasks woken meanwhile (a backend's reply) run inside the sleep.
//! - Busy ([`tick`], called by flow delivery at the end of each round with
//!   work; [`Sleeper::idle`] on rounds that spin): the readers the round
//!   filled are woken inside the runtime's context (a same-thread wake is a
//!   queue push, no syscall), the ready tasks run (a bounded number of
//!   passes), and at most every [`IO_INTERVAL`] the event loop is polled
//!   without blocking, so tasks waiting for sockets or timers progress while
//!   the worker never sleeps.
//! - End ([`finish`], on the worker thread before it exits): when the engine
//!   is stopping the tasks get a grace period to see it and end; what is
//!   left is dropped inside the runtime's context.
//!
//! Invariant: the executor is touched only from its worker thread; other
//! threads reach it only through the doorbell, a `Notify` whose wake before
//! a sleep is kept as a permit, so no wake is lost.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use steer_core::wake::Sleeper;
use tokio::io::unix::AsyncFd;
use tokio::runtime::Runtime;
use tokio::sync::Notify;
use tokio::task::LocalSet;

/// A busy worker polls its event loop (without blocking) at most this
/// often: the tasks' sockets and timers are seen at least this soon.
pub(crate) const IO_INTERVAL: Duration = Duration::from_micros(50);

/// Idle rounds between two looks at the clock.
const IDLE_CHECK_EVERY: u32 = 16;

/// Tasks a `LocalSet` runs per poll (tokio's `MAX_TASKS_PER_TICK`).
const TASKS_PER_PASS: usize = 61;

/// Most polls of the `LocalSet` per tick.
const MAX_PASSES: usize = 8;

/// One worker's executor before it is installed on the worker thread.
pub(crate) struct WorkerTasks {
    // Deregistered before the runtime goes.
    rx: Vec<AsyncFd<OwnedFd>>,
    rt: Runtime,
    bell: Arc<Notify>,
}

impl std::fmt::Debug for WorkerTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerTasks")
            .field("sockets", &self.rx.len())
            .finish_non_exhaustive()
    }
}

impl WorkerTasks {
    /// A runtime whose event loop also wakes when one of `fds` (duplicates
    /// of the AF_XDP sockets the worker polls) becomes readable.
    pub(crate) fn new(fds: Vec<OwnedFd>) -> io::Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let rx = {
            let _inside = rt.enter();
            fds.into_iter()
                .map(steer_xdp::readiness::async_readable)
                .collect::<io::Result<Vec<_>>>()?
        };
        Ok(Self {
            rx,
            rt,
            bell: Arc::new(Notify::new()),
        })
    }

    /// Makes this the calling thread's executor (the worker thread, from its
    /// `Setup::sleeper`); returns the worker's sleeper.
    pub(crate) fn install(self) -> TaskSleeper {
        let bell = Arc::clone(&self.bell);
        let timer = {
            let _inside = self.rt.enter();
            Box::pin(tokio::time::sleep(Duration::ZERO))
        };
        let exec = Executor {
            local: LocalSet::new(),
            timer,
            rx: self.rx,
            rt: self.rt,
            bell: self.bell,
            last_io: Instant::now(),
            idle_rounds: 0,
        };
        let _ = EXEC.try_with(|e| *e.borrow_mut() = Some(exec));
        TaskSleeper { bell }
    }
}

/// The installed executor (fields drop in order: tasks, timer, sockets,
/// runtime).
struct Executor {
    local: LocalSet,
    /// Bounds a sleep. One timer, moved on only once it has fired: a fresh
    /// timer per sleep is often due before the event loop's next wake-up,
    /// and registering such a timer wakes the event loop (an eventfd write).
    timer: Pin<Box<tokio::time::Sleep>>,
    rx: Vec<AsyncFd<OwnedFd>>,
    rt: Runtime,
    bell: Arc<Notify>,
    /// When the event loop was last polled.
    last_io: Instant,
    idle_rounds: u32,
}

thread_local! {
    static EXEC: RefCell<Option<Executor>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's executor; `None` without one (or re-entered).
fn with_executor<R>(f: impl FnOnce(&mut Executor) -> R) -> Option<R> {
    EXEC.try_with(|e| {
        let mut e = e.try_borrow_mut().ok()?;
        e.as_mut().map(f)
    })
    .ok()
    .flatten()
}

impl Executor {
    /// Polls the `LocalSet` up to `passes` times (each runs at most
    /// [`TASKS_PER_PASS`] tasks) with `cx`, the runtime's own waker, so a
    /// task woken later from inside the runtime schedules without a syscall.
    fn run_ready(local: &mut LocalSet, cx: &mut std::task::Context<'_>, passes: usize) {
        for _ in 0..passes {
            if Pin::new(&mut *local).poll(cx).is_ready() {
                break;
            }
        }
    }

    fn tick(&mut self, woken: usize, wake: Option<impl FnOnce()>) {
        let turn_io = self.last_io.elapsed() >= IO_INTERVAL;
        let passes = (1 + woken / TASKS_PER_PASS).min(MAX_PASSES);
        let Self { rt, local, .. } = self;
        let mut wake = wake;
        let mut turned = false;
        rt.block_on(std::future::poll_fn(|cx| {
            if let Some(wake) = wake.take() {
                wake();
            }
            Self::run_ready(local, cx, passes);
            if turn_io && !turned {
                // Pending with our own wake: the runtime polls its event
                // loop without blocking, then polls us again.
                turned = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(())
        }));
        if turned {
            self.last_io = Instant::now();
        }
    }

    fn sleep(&mut self, timeout: Duration) {
        let Self {
            rt,
            local,
            rx,
            bell,
            timer,
            ..
        } = self;
        rt.block_on(async {
            let rung = bell.notified();
            tokio::pin!(rung);
            // A sleep ends by `timeout` at the latest, maybe sooner (the
            // timer was set by an earlier sleep): a spurious wake-up.
            let now = tokio::time::Instant::now();
            if timer.deadline() <= now || timer.deadline() > now + timeout {
                timer.as_mut().reset(now + timeout);
            }
            std::future::poll_fn(|cx| {
                Self::run_ready(local, cx, MAX_PASSES);
                let mut wake = rung.as_mut().poll(cx).is_ready();
                wake |= timer.as_mut().poll(cx).is_ready();
                for fd in rx.iter() {
                    match fd.poll_read_ready(cx) {
                        // Cleared here; the worker polls the ring next, so
                        // frames that arrived before the clear are seen.
                        Poll::Ready(Ok(mut ready)) => {
                            ready.clear_ready();
                            wake = true;
                        }
                        Poll::Ready(Err(_)) => wake = true,
                        Poll::Pending => {}
                    }
                }
                if wake {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await
        });
        self.last_io = Instant::now();
    }

    fn idle(&mut self) {
        self.idle_rounds = self.idle_rounds.wrapping_add(1);
        if self.idle_rounds.is_multiple_of(IDLE_CHECK_EVERY)
            && self.last_io.elapsed() >= IO_INTERVAL
        {
            self.tick(0, None::<fn()>);
        }
    }
}

/// A worker's [`Sleeper`] when its thread runs tasks: it sleeps in the
/// runtime's event loop (see the module docs); other threads ring it.
#[derive(Debug)]
pub(crate) struct TaskSleeper {
    bell: Arc<Notify>,
}

impl Sleeper for TaskSleeper {
    fn sleep(&self, timeout: Duration) {
        if with_executor(|e| e.sleep(timeout)).is_none() {
            // No executor (the worker is ending): a plain timed sleep.
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
        }
    }

    fn wake(&self) {
        self.bell.notify_one();
    }

    fn idle(&self) {
        with_executor(Executor::idle);
    }
}

/// The end of a busy round on this thread's executor: `wake` (which wakes
/// `woken` readers) runs inside the runtime's context, then the ready tasks
/// run; the event loop is polled without blocking if it is due. Without an
/// executor `wake` just runs.
pub(crate) fn tick(woken: usize, wake: impl FnOnce()) {
    let mut wake = Some(wake);
    with_executor(|e| e.tick(woken, wake.take()));
    if let Some(wake) = wake {
        wake();
    }
}

/// Spawns `task` on this thread's executor; `false` without one.
pub(crate) fn spawn_local(task: Pin<Box<dyn Future<Output = ()>>>) -> bool {
    let mut task = Some(task);
    with_executor(|e| {
        if let Some(task) = task.take() {
            drop(e.local.spawn_local(task));
        }
    })
    .is_some()
}

/// Ends this thread's executor: with `grace`, its tasks run until they all
/// ended or `grace` passed; what is left is dropped inside the runtime's
/// context. Nothing without an executor.
pub(crate) fn finish(grace: Option<Duration>) {
    let Some(exec) = EXEC
        .try_with(|e| e.try_borrow_mut().ok().and_then(|mut e| e.take()))
        .ok()
        .flatten()
    else {
        return;
    };
    let Executor {
        mut local,
        timer,
        rx,
        rt,
        ..
    } = exec;
    if let Some(grace) = grace {
        rt.block_on(async {
            let _ = tokio::time::timeout(grace, &mut local).await;
        });
    }
    {
        let _inside = rt.enter();
        drop(local);
        drop(timer);
        drop(rx);
    }
    drop(rt);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;
    use std::rc::Rc;

    /// Installs an executor without sockets on the calling thread.
    fn install() -> TaskSleeper {
        WorkerTasks::new(Vec::new()).unwrap().install()
    }

    /// A worker that never sleeps (a round with work after another) still
    /// runs its tasks, and their sockets and timers make progress: a task
    /// waits for a UDP reply and a timer while the "worker" only ticks.
    #[test]
    fn tasks_run_while_the_worker_is_continuously_busy() {
        std::thread::spawn(|| {
            let _sleeper = install();
            let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
            let peer_addr = peer.local_addr().unwrap();
            let echoes = Rc::new(Cell::new(0u32));
            let timers = Rc::new(Cell::new(0u32));
            let (e, t) = (Rc::clone(&echoes), Rc::clone(&timers));
            assert!(spawn_local(Box::pin(async move {
                let s = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
                s.connect(peer_addr).await.unwrap();
                let mut buf = [0u8; 16];
                for i in 0..50u32 {
                    s.send(&i.to_be_bytes()).await.unwrap();
                    let n = s.recv(&mut buf).await.unwrap();
                    assert_eq!(&buf[..n], &i.to_be_bytes());
                    e.set(e.get() + 1);
                }
            })));
            assert!(spawn_local(Box::pin(async move {
                for _ in 0..5 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    t.set(t.get() + 1);
                }
            })));
            peer.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let echo = std::thread::spawn(move || {
                let mut buf = [0u8; 16];
                for _ in 0..50 {
                    let Ok((n, from)) = peer.recv_from(&mut buf) else {
                        return;
                    };
                    peer.send_to(&buf[..n], from).unwrap();
                }
            });
            let start = Instant::now();
            while (echoes.get() < 50 || timers.get() < 5)
                && start.elapsed() < Duration::from_secs(10)
            {
                // A round with work: the worker ticks and never sleeps.
                tick(0, || {});
                std::hint::spin_loop();
            }
            echo.join().unwrap();
            assert_eq!((echoes.get(), timers.get()), (50, 5));
            finish(None);
        })
        .join()
        .unwrap();
    }

    /// Readers woken in a tick run in that tick, before the round ends.
    #[test]
    fn a_reader_woken_by_the_round_runs_in_its_tick() {
        std::thread::spawn(|| {
            let _sleeper = install();
            let notify = Rc::new(tokio::sync::Notify::new());
            let got = Rc::new(Cell::new(0u32));
            let (n, g) = (Rc::clone(&notify), Rc::clone(&got));
            spawn_local(Box::pin(async move {
                loop {
                    n.notified().await;
                    g.set(g.get() + 1);
                }
            }));
            tick(0, || {}); // the task starts and waits
            for i in 1..=100 {
                tick(1, || notify.notify_one());
                assert_eq!(got.get(), i);
            }
            finish(None);
        })
        .join()
        .unwrap();
    }

    /// The doorbell wakes a sleeping worker from another thread, a ring
    /// before the sleep is not lost, and the timeout bounds the sleep.
    #[test]
    fn the_doorbell_and_the_timeout_end_a_sleep() {
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            let sleeper = Arc::new(install());
            tx.send(Arc::clone(&sleeper)).unwrap();
            let start = Instant::now();
            sleeper.sleep(Duration::from_secs(30));
            let rung = start.elapsed();
            let start = Instant::now();
            sleeper.sleep(Duration::from_millis(20));
            let timed_out = start.elapsed();
            finish(None);
            (rung, timed_out)
        });
        let sleeper = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        sleeper.wake();
        let (rung, timed_out) = worker.join().unwrap();
        assert!(rung < Duration::from_secs(10), "{rung:?}");
        assert!(timed_out >= Duration::from_millis(15), "{timed_out:?}");
        assert!(timed_out < Duration::from_secs(10), "{timed_out:?}");
    }

    /// A readable socket of the worker ends its sleep.
    #[test]
    fn a_readable_socket_ends_a_sleep() {
        std::thread::spawn(|| {
            let a = UdpSocket::bind("127.0.0.1:0").unwrap();
            let b = UdpSocket::bind("127.0.0.1:0").unwrap();
            let fd = a.as_fd().try_clone_to_owned().unwrap();
            let sleeper = WorkerTasks::new(vec![fd]).unwrap().install();
            b.send_to(b"x", a.local_addr().unwrap()).unwrap();
            let start = Instant::now();
            sleeper.sleep(Duration::from_secs(30));
            assert!(start.elapsed() < Duration::from_secs(10));
            finish(None);
        })
        .join()
        .unwrap();
    }

    /// With a grace period the tasks see the end and finish their work.
    #[test]
    fn finish_lets_tasks_end_within_the_grace_period() {
        std::thread::spawn(|| {
            let _sleeper = install();
            let ended = Rc::new(Cell::new(false));
            let e = Rc::clone(&ended);
            spawn_local(Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                e.set(true);
            }));
            finish(Some(Duration::from_secs(5)));
            assert!(ended.get());
            assert!(with_executor(|_| ()).is_none());
            assert!(!spawn_local(Box::pin(async {})));
        })
        .join()
        .unwrap();
    }
}
