//! The send Lambda's entry point. The AWS and SMTP adapters it wires are being built under
//! issue 4; until they land this binary refuses to start rather than run half-wired.

fn main() {
    eprintln!("courier-send: the AWS adapters are not wired yet (issue 4); see README.md");
    std::process::exit(1);
}
