//! The code-interpreter tool wired as a function-calling tool: what an application gives the
//! LLM (the tool's definition with the JSON schema of its arguments) and what it answers to
//! the LLM's call. The LLM is simulated by a fixed call.
//!
//! ```sh
//! warden serve &
//! cargo run -p warden-client --example code_interpreter
//! ```

use warden_client::{Client, CodeInterpreterTool};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("WARDEN_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let tool = CodeInterpreterTool::one_shot(Client::new(&url)?);

    // 1. The tool definition, in the `tools` list of an OpenAI chat completion request
    //    (`tool.anthropic_tool()` for Anthropic's messages API).
    println!("tool definition:");
    println!("{}", serde_json::to_string_pretty(&tool.openai_tool())?);

    // 2. The LLM answers with a call: a tool name and its arguments as a JSON string.
    let (name, arguments) = (
        "code_interpreter",
        r#"{"code": "import math; print(math.sqrt(144))", "language": "python"}"#,
    );
    assert_eq!(name, tool.name());
    println!("call: {name}({arguments})");

    // 3. The tool's answer goes back to the LLM as the tool message's content.
    let answer = tool.try_call(arguments).await?;
    println!("answer:\n{answer}");
    Ok(())
}
