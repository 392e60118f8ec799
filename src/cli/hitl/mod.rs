//! `kubectl hitl`: list, inspect, watch and decide ApprovalRequests (the `kubectl-hitl` plugin).

pub mod accept_tools;
pub mod describe;
pub mod edits;
pub mod error;
pub mod grants;
pub mod identity;
pub mod inbox;
pub mod output;
pub mod table;
pub mod watch;

use std::io::Write;

use clap::{Args, Parser, Subcommand};
use jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::config::{Config, KubeConfigOptions};

use self::error::CommandError;
use self::output::Format;
use crate::api::approval_grant::ApprovalGrant;
use crate::api::approval_request::{ApprovalRequest, DecisionType, Phase};
use crate::apiserver::backoff::BackoffWhileFailing;
use crate::apiserver::paging::list_all;
use crate::decide::{self, Outcome};

/// See and decide the tool calls your AI agents wait on (ApprovalRequests).
#[derive(Parser, Debug)]
#[command(name = "kubectl-hitl", bin_name = "kubectl hitl", version)]
pub struct Cli {
    /// Namespace to use (default: the kubeconfig context's namespace).
    #[arg(short, long, global = true)]
    pub namespace: Option<String>,
    /// Kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// List ApprovalRequests.
    List(ListArgs),
    /// Show one ApprovalRequest.
    Get(GetArgs),
    /// Approve requests: the tool call runs once.
    Approve(ApproveArgs),
    /// Deny requests: the tool call does not run; the agent sees the reason.
    Deny(DenyArgs),
    /// Stream new and changed ApprovalRequests until interrupted.
    Watch(WatchArgs),
    /// Open a web inbox on 127.0.0.1 to see and decide requests, as yourself.
    Ui(UiArgs),
    /// List standing approvals (ApprovalGrants), or revoke them.
    Grants(GrantsArgs),
    /// Accept tool definitions: calls of a tool listed with another definition than the one
    /// accepted wait for an approval.
    AcceptTools(AcceptToolsArgs),
}

/// `accept-tools` options.
#[derive(Args, Debug)]
pub struct AcceptToolsArgs {
    /// `remotemcpserver/NAME`: every tool its status.discoveredTools lists, as listed; or the
    /// name of an ApprovalRequest: the definition it recorded of its tool, on its tool server.
    pub target: String,
    /// Only these tools (with remotemcpserver/NAME; repeat for more).
    #[arg(long = "tool")]
    pub tools: Vec<String>,
}

/// `grants` options.
#[derive(Args, Debug)]
pub struct GrantsArgs {
    /// List across all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format instead of the table.
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
    /// What to do instead of listing.
    #[command(subcommand)]
    pub action: Option<GrantsCommand>,
}

/// `grants` subcommands.
#[derive(Subcommand, Debug)]
pub enum GrantsCommand {
    /// Revoke grants at once: calls they covered ask a person again.
    Revoke {
        /// Names of ApprovalGrants.
        #[arg(required = true)]
        names: Vec<String>,
    },
}

/// `list` options.
#[derive(Args, Debug)]
pub struct ListArgs {
    /// List across all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only requests still waiting for a decision.
    #[arg(long)]
    pub pending: bool,
    /// Output format instead of the table.
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

/// `get` options.
#[derive(Args, Debug)]
pub struct GetArgs {
    /// Name of the ApprovalRequest.
    pub name: String,
    /// Output format instead of the description.
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

/// Which requests to decide.
#[derive(Args, Debug)]
pub struct Targets {
    /// Names of ApprovalRequests.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub names: Vec<String>,
    /// Every Pending request of the agent given by --agent.
    #[arg(long, requires = "agent")]
    pub all: bool,
    /// The agent whose Pending requests --all decides.
    #[arg(long, requires = "all")]
    pub agent: Option<String>,
}

/// `approve` options.
#[derive(Args, Debug)]
pub struct ApproveArgs {
    /// Which requests.
    #[command(flatten)]
    pub targets: Targets,
    /// Why (recorded in spec.decision.reason, and in the grant --remember creates).
    #[arg(long)]
    pub reason: Option<String>,
    /// Also let the agent's later calls of the same tool run without asking, by creating an
    /// ApprovalGrant: `session` (only this request's MCP session), a duration (default 1h)
    /// and `N-uses`, comma-separated, e.g. `session`, `30m,5-uses`. One request only.
    #[arg(long, conflicts_with = "all")]
    pub remember: Option<grants::Remember>,
    /// Approve the call with edits: a JSON Patch (RFC 6902) on its arguments as the preview
    /// shows them, e.g. '[{"op":"replace","path":"/path","value":"/tmp/b"}]'. The call then
    /// runs only with the edited arguments. Needs the RBAC verb edit; one request only.
    #[arg(long, conflicts_with_all = ["all", "remember", "edit"])]
    pub patch: Option<String>,
    /// Open $VISUAL or $EDITOR on the arguments as the preview shows them; the edits become
    /// the patch (as --patch). One request only.
    #[arg(long, conflicts_with_all = ["all", "remember"])]
    pub edit: bool,
}

/// `deny` options.
#[derive(Args, Debug)]
pub struct DenyArgs {
    /// Which requests.
    #[command(flatten)]
    pub targets: Targets,
    /// Why; the agent's LLM sees it.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub reason: String,
}

/// `watch` options.
#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Watch across all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only show requests that are Pending.
    #[arg(long)]
    pub pending: bool,
}

/// `ui` options.
#[derive(Args, Debug)]
pub struct UiArgs {
    /// Show every namespace (needs list and watch on approvalrequests cluster-wide).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Print the address without opening a browser.
    #[arg(long)]
    pub no_open: bool,
}

/// Parse-independent entry point: connect with the kubeconfig and run `cli`. Returns whether
/// everything succeeded; errors go to `err`.
pub async fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> bool {
    let result = match connect(&cli).await {
        Ok((client, namespace)) => {
            execute(&cli.command, client, &namespace, &Timestamp::now, out, err).await
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(ok) => ok,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            false
        }
    }
}

/// A client for the chosen context and the namespace to use.
async fn connect(cli: &Cli) -> Result<(Client, String), CommandError> {
    let config = match &cli.context {
        Some(context) => Config::from_kubeconfig(&KubeConfigOptions {
            context: Some(context.clone()),
            ..Default::default()
        })
        .await
        .map_err(|e| CommandError::Kubeconfig(e.to_string()))?,
        None => Config::infer()
            .await
            .map_err(|e| CommandError::Kubeconfig(e.to_string()))?,
    };
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(|e| CommandError::Kubeconfig(e.to_string()))?;
    Ok((client, namespace))
}

/// Run `command` against `client` in `namespace`. Returns whether every request succeeded.
pub async fn execute(
    command: &Command,
    client: Client,
    namespace: &str,
    clock: &dyn Fn() -> Timestamp,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<bool, CommandError> {
    let scoped = |all: bool| -> Api<ApprovalRequest> {
        if all {
            Api::all(client.clone())
        } else {
            Api::namespaced(client.clone(), namespace)
        }
    };
    match command {
        Command::List(args) => {
            let now = clock();
            let mut items = list_all(&scoped(args.all_namespaces), &ListParams::default()).await?;
            if args.pending {
                items.retain(|r| r.phase_at(now) == Phase::Pending);
            }
            match args.output {
                Some(format) => {
                    out.write_all(output::encode(&output::list(&items), format)?.as_bytes())?
                }
                None if items.is_empty() => {
                    let scope = if args.all_namespaces {
                        "any namespace".to_owned()
                    } else {
                        format!("namespace {namespace}")
                    };
                    let what = if args.pending {
                        "pending ApprovalRequests"
                    } else {
                        "ApprovalRequests"
                    };
                    writeln!(err, "No {what} found in {scope}.")?;
                }
                None => out.write_all(table::table(&items, now, args.all_namespaces).as_bytes())?,
            }
            Ok(true)
        }
        Command::Get(args) => match scoped(false).get_opt(&args.name).await? {
            None => {
                writeln!(
                    err,
                    "{}",
                    Outcome::NotFound {
                        name: args.name.clone()
                    }
                    .describe(namespace, "")
                )?;
                Ok(false)
            }
            Some(r) => {
                let text = match args.output {
                    Some(format) => output::encode(&r, format)?,
                    None => describe::describe(&r, clock()),
                };
                out.write_all(text.as_bytes())?;
                Ok(true)
            }
        },
        Command::Approve(args) => {
            let edit = if args.patch.is_some() || args.edit {
                match edits::asked(&client, &scoped(false), args).await? {
                    Ok(edit) => Some(edit),
                    Err(line) => {
                        writeln!(err, "error: {line}")?;
                        return Ok(false);
                    }
                }
            } else {
                None
            };
            let request = decide::Request {
                decision_type: DecisionType::Approve,
                reason: args.reason.clone(),
                user: identity::username(&client).await?,
                edit,
            };
            let grant = match &args.remember {
                None => None,
                Some(remember) => {
                    match remembered(&scoped(false), args, remember, &request.user, clock()).await?
                    {
                        Ok(grant) => Some(grant),
                        Err(line) => {
                            writeln!(err, "error: {line}")?;
                            return Ok(false);
                        }
                    }
                }
            };
            let decided = decide(
                &scoped(false),
                namespace,
                &args.targets,
                &request,
                clock,
                out,
                err,
            )
            .await?;
            let Some(grant) = grant.filter(|_| decided) else {
                return Ok(decided);
            };
            match grants::create(&Api::namespaced(client, namespace), &grant, clock()).await {
                Ok(line) => writeln!(out, "{line}")?,
                Err(line) => {
                    writeln!(err, "{line}")?;
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Command::AcceptTools(args) => {
            let target = accept_tools::Target::parse(&args.target);
            match accept_tools::accept(&client, namespace, &target, &args.tools, out).await? {
                Ok(()) => Ok(true),
                Err(why) => {
                    writeln!(err, "error: {why}")?;
                    Ok(false)
                }
            }
        }
        Command::Grants(args) => {
            let api: Api<ApprovalGrant> = if args.all_namespaces {
                Api::all(client)
            } else {
                Api::namespaced(client, namespace)
            };
            if let Some(GrantsCommand::Revoke { names }) = &args.action {
                let (lines, ok) = grants::revoke(&api, names, namespace).await;
                for line in lines {
                    if line.starts_with("error:") {
                        writeln!(err, "{line}")?;
                    } else {
                        writeln!(out, "{line}")?;
                    }
                }
                return Ok(ok);
            }
            let items = list_all(&api, &ListParams::default()).await?;
            match args.output {
                Some(format) => {
                    out.write_all(output::encode(&output::list(&items), format)?.as_bytes())?
                }
                None if items.is_empty() => writeln!(err, "No ApprovalGrants found.")?,
                None => {
                    out.write_all(grants::table(&items, clock(), args.all_namespaces).as_bytes())?
                }
            }
            Ok(true)
        }
        Command::Deny(args) => {
            let request = decide::Request {
                decision_type: DecisionType::Deny,
                reason: Some(args.reason.clone()),
                user: identity::username(&client).await?,
                edit: None,
            };
            decide(
                &scoped(false),
                namespace,
                &args.targets,
                &request,
                clock,
                out,
                err,
            )
            .await
        }
        Command::Watch(args) => {
            let events = watch::events(scoped(args.all_namespaces)).backoff_while_failing();
            watch::print_events(events, clock, args.all_namespaces, args.pending, out, err).await?;
            Ok(true)
        }
        Command::Ui(args) => {
            let scope = if args.all_namespaces {
                inbox::Scope::All
            } else {
                inbox::Scope::Namespace(namespace.to_owned())
            };
            let user = identity::username(&client).await?;
            inbox::run(client, scope, user, args, out).await
        }
    }
}

/// The grant `approve --remember` gives for its one request, or the line saying why it cannot:
/// checked before anything is written.
async fn remembered(
    api: &Api<ApprovalRequest>,
    args: &ApproveArgs,
    remember: &grants::Remember,
    user: &str,
    now: Timestamp,
) -> Result<Result<ApprovalGrant, String>, CommandError> {
    let [name] = args.targets.names.as_slice() else {
        return Ok(Err("--remember approves one request at a time".into()));
    };
    let Some(request) = api.get_opt(name).await? else {
        return Ok(Err(format!("approvalrequest/{name} not found")));
    };
    Ok(grants::grant_for(
        &request,
        remember,
        args.reason.as_deref(),
        user,
        now,
    ))
}

/// Decide the targets and report each outcome.
async fn decide(
    api: &Api<ApprovalRequest>,
    namespace: &str,
    targets: &Targets,
    request: &decide::Request,
    clock: &dyn Fn() -> Timestamp,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<bool, CommandError> {
    let outcomes = match &targets.agent {
        Some(agent) if targets.all => {
            let outcomes = decide::decide_agent(api, agent, request, clock()).await?;
            if outcomes.is_empty() {
                writeln!(
                    out,
                    "No pending ApprovalRequests of agent {agent} in namespace {namespace}."
                )?;
            }
            outcomes
        }
        _ => decide::decide_names(api, &targets.names, request, clock()).await?,
    };
    let mut ok = true;
    for outcome in &outcomes {
        let line = outcome.describe(namespace, &request.user);
        if outcome.is_success() {
            writeln!(out, "{line}")?;
        } else {
            ok = false;
            writeln!(err, "{line}")?;
        }
    }
    Ok(ok)
}
