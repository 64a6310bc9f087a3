//! Ctrl-C, SIGTERM and SIGHUP: run a cleanup, then exit as a shell reports a death by that
//! signal, 128 + its number (130, 143, 129), so that a CI system tells an interrupt from a stop.
//! The handlers are tokio's (the signal stays deliverable to children, unlike a blocked mask),
//! registered before this returns; the cleanup runs on a thread of its own.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::signal::unix::{SignalKind, signal};

static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Held by whichever ends the process first: a signal's cleanup, or [`exit`] at the command's
/// end. A cleanup that stops the VMs makes the matrix fail on its own ("the VM died"); without
/// this its exit code 2 could win the race against the interrupt's 130, and cut the cleanup
/// short.
static EXITING: Mutex<()> = Mutex::new(());

/// Ends the process with `code`, unless a signal's cleanup is under way: that one finishes and
/// exits with 128 + the signal's number.
pub fn exit(code: i32) -> ! {
    let _exiting = EXITING.lock().unwrap_or_else(|e| e.into_inner());
    std::process::exit(code)
}

/// Runs `cleanup` on the first SIGINT, SIGTERM or SIGHUP, then exits with 128 + its number.
/// Only the first call installs anything: a process has one cleanup.
pub fn on_termination(cleanup: impl Fn() + Send + 'static) {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_io().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("packetproof: no handler for Ctrl-C and SIGTERM: {e}");
            return;
        }
    };
    let streams = {
        let _in_runtime = runtime.enter();
        [(2, SignalKind::interrupt()), (15, SignalKind::terminate()), (1, SignalKind::hangup())]
            .map(|(number, kind)| (number, signal(kind)))
    };
    let mut registered = Vec::new();
    for (number, stream) in streams {
        match stream {
            Ok(stream) => registered.push((number, stream)),
            Err(e) => eprintln!("packetproof: no handler for signal {number}: {e}"),
        }
    }
    let spawned = std::thread::Builder::new().name("signals".into()).spawn(move || {
        let number = runtime.block_on(async move {
            let waits = registered.iter_mut().map(|(number, stream)| {
                let number = *number;
                Box::pin(async move {
                    stream.recv().await;
                    number
                })
            });
            futures::future::select_all(waits).await.0
        });
        let _exiting = EXITING.lock().unwrap_or_else(|e| e.into_inner());
        cleanup();
        std::process::exit(128 + number);
    });
    if let Err(e) = spawned {
        eprintln!("packetproof: no handler for Ctrl-C and SIGTERM: {e}");
    }
}
