//! A sandbox with a lifetime: upload a file, run code on it in two steps that share the
//! workspace, list and download what it made, destroy the sandbox.
//!
//! ```sh
//! warden serve &
//! cargo run -p warden-client --example sandbox_session
//! ```

use warden_client::{Client, Sandbox, SandboxOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), warden_client::Error> {
    let url = std::env::var("WARDEN_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let client = Client::new(&url)?;

    let sandbox =
        Sandbox::create(&client, SandboxOptions::new().label("example", "session")).await?;
    println!(
        "sandbox {} ({})",
        sandbox.id(),
        sandbox.created_info().language
    );

    let written = sandbox
        .upload("data/prices.csv", "item,price\napple,3\npear,5\n")
        .await?;
    println!("uploaded {} ({} bytes)", written.path, written.size);

    // Step 1 writes a file; step 2, a separate execution, reads it: the workspace is shared.
    let step1 = sandbox
        .run(
            "import csv\n\
             rows = list(csv.DictReader(open('data/prices.csv')))\n\
             total = sum(int(r['price']) for r in rows)\n\
             open('total.txt', 'w').write(str(total))\n\
             print('rows:', len(rows))",
        )
        .await?;
    print!("step 1: {}", step1.stdout);
    let step2 = sandbox
        .run("print('total:', open('total.txt').read())")
        .await?;
    print!("step 2: {}", step2.stdout);

    for file in sandbox.files().await? {
        println!(
            "  {}{} {} bytes",
            file.path,
            if file.is_dir { "/" } else { "" },
            file.size
        );
    }
    let total = sandbox.download("total.txt").await?;
    println!("downloaded total.txt: {}", String::from_utf8_lossy(&total));

    let info = sandbox.info().await?;
    println!(
        "executions: {}, expires at {}",
        info.executions, info.expires_at
    );
    sandbox.destroy().await?;
    println!("destroyed");
    Ok(())
}
