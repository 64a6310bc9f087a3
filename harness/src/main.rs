/// mimalloc rather than glibc's malloc. Reading a scenario of 100,000 Services spent 38 % of
/// its time in glibc's malloc and free (`perf`), and glibc gives every thread that allocates
/// its own arena, keeping what each freed for that thread: the built-in proxies program
/// their nodes on a thread each, and at 10,000 Services each node's transient rules stayed
/// in an arena of their own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    packetproof::signals::exit(packetproof::cli::main());
}
