fn main() {
    std::process::exit(packetproof::cli::main());
}
