//! One-shot execution: run code once in a fresh sandbox, then again with its output streamed.
//!
//! ```sh
//! warden serve &                       # 127.0.0.1:8080
//! cargo run -p warden-client --example hello
//! ```
//! `WARDEN_URL` points the example at another daemon.

use futures_util::StreamExt;
use warden_client::{Client, ExecEvent, ExecuteRequest};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), warden_client::Error> {
    let url = std::env::var("WARDEN_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let client = Client::new(&url)?;

    let result = client.execute("print('hello from the sandbox')").await?;
    print!("{}", result.stdout);
    println!(
        "reason: {}, exit code: {:?}",
        result.reason, result.exit_code
    );

    let request = ExecuteRequest::new("echo \"6 * 7 = $((6 * 7))\"").language("bash");
    let result = client.execute(request).await?;
    print!("{}", result.stdout);

    // Chunks come as the program writes them (a line may come in several pieces).
    let mut events = client
        .execute_stream(
            "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.2)",
        )
        .await?;
    while let Some(event) = events.next().await {
        match event? {
            ExecEvent::Stdout { text, timestamp } => println!("stdout at {timestamp}: {text:?}"),
            ExecEvent::Stderr { text, timestamp } => println!("stderr at {timestamp}: {text:?}"),
            // The SDK yields the daemon's `error` event as `Err(Error::Execution)` instead.
            ExecEvent::Error { .. } => {}
            ExecEvent::End(result) => println!(
                "streamed run ended: {} in {} ms, stdout {:?}",
                result.reason, result.duration_ms, result.stdout
            ),
        }
    }
    Ok(())
}
