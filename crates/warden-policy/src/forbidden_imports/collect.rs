//! The AST walk: every place a Python module may name another module to import.
//!
//! Invariants: the walk visits the whole tree (function and class bodies, `if`/`try`/`with`/
//! `match` bodies, decorators, default arguments, annotations, comprehensions, lambdas, f-string
//! interpolations) through `ruff_python_ast`'s visitor, so no statement is skipped because of
//! where it sits. The walk is flow-insensitive: a name bound to an import function anywhere
//! (`im = importlib.import_module`) makes every call of that name an import, before or after the
//! binding, in any scope — over-approximating is the safe direction here.
//!
//! What counts as an import:
//! - `import a.b` (the module `a.b`), `from a.b import c` (the module `a.b`, or every `a.b.c`);
//!   relative imports (`from . import x`, `from .m import y`) are not reported: they name the
//!   user's own files in the workspace.
//! - calls of an import function, recognised by shape: the names `__import__` and
//!   `import_module`, any attribute `.__import__` or `.import_module` (`importlib.import_module`,
//!   `il.import_module` after `import importlib as il`, `builtins.__import__`,
//!   `__builtins__.__import__`, `importlib.__import__`), `getattr(x, "__import__")` and
//!   `x["__import__"]` with a literal name, and any name bound to one of these by `from importlib
//!   import import_module as im`, `from builtins import __import__ as imp` or `f = <import fn>`.
//! - the same, inside a string literal passed to `exec`, `eval` or `compile`, which is parsed and
//!   walked in turn (reported at the string's position).
//!
//! Depth: the parser builds trees as deep as the code nests (`1+1+…+1`, `-----1`, `[[[…]]]`), and
//! both a recursive walk and the trees' drop glue use native stack per level, so deep enough code
//! would overflow the stack and abort the whole process. The walk therefore grows its stack on
//! demand (`stacker`), measures the tree's depth as it goes, and every tree is dropped through
//! [`drop_tree`] on a stack sized for that depth; [`parse`] bounds what the parser itself may
//! need. Any input is checked without crashing the process.

use std::collections::{HashMap, HashSet};

use ruff_python_ast::token::TokenKind;
use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{self as ast, Expr, Number, Stmt};
use ruff_text_size::Ranged;

/// How deep `exec("exec('...')")` strings are followed.
const MAX_EXEC_DEPTH: u32 = 4;

/// Stack the walk keeps free before descending one level; below it, a new segment is allocated.
const WALK_RED_ZONE: usize = 256 * 1024;
/// The size of each stack segment the walk allocates.
const WALK_SEGMENT: usize = 4 * 1024 * 1024;
/// Stack the drop glue of one tree level may use. Measured at 96–555 bytes in debug builds
/// (lambda default arguments are the worst); four times that, for margin.
const DROP_BYTES_PER_LEVEL: usize = 2 * 1024;
/// Stack for the drop glue's own frames beyond the per-level cost.
const DROP_BASE: usize = 64 * 1024;

/// The functions that import a module by name, with their different signatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImportFn {
    /// `__import__(name, globals=None, locals=None, fromlist=(), level=0)`
    DunderImport,
    /// `importlib.import_module(name, package=None)`
    ImportModule,
}

impl ImportFn {
    fn from_name(name: &str) -> Option<Self> {
        match name {
            "__import__" => Some(Self::DunderImport),
            "import_module" => Some(Self::ImportModule),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::DunderImport => "__import__",
            Self::ImportModule => "import_module",
        }
    }
}

/// One place that imports, or may import, a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// Byte offset in the checked source where the finding is reported.
    pub(crate) offset: usize,
    pub(crate) what: What,
    /// Set when the finding comes from a string passed to `exec`, `eval` or `compile`.
    pub(crate) inside: Option<&'static str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum What {
    /// An import of `module`; it is also allowed when every one of `submodules` is (the
    /// `a.b.c` of `from a.b import c`, which may name a submodule).
    Module {
        module: String,
        submodules: Vec<String>,
    },
    /// A call of an import function whose module is known only at run time.
    Dynamic { function: ImportFn, why: Dynamic },
}

/// Why a dynamic import's module cannot be known statically.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dynamic {
    /// The module name is not a string literal.
    Name,
    /// `__import__`'s level is not an integer literal.
    Level,
    /// `__import__` with a relative level resolves against explicit globals.
    Globals,
    /// `import_module`'s package for a relative name is not a string literal.
    Package,
}

/// What a walk found.
#[derive(Debug)]
pub(crate) struct Collected {
    /// Every finding, in source order.
    pub(crate) findings: Vec<Finding>,
    /// The deepest nesting of statements, expressions and patterns seen (at least that of the
    /// walked tree): what [`drop_tree`] needs.
    pub(crate) depth: usize,
}

/// Walks `body` (a parsed module) and returns every finding, in source order.
pub(crate) fn collect(body: &[Stmt]) -> Collected {
    let mut collector = Collector::default();
    collector.visit_body(body);
    let depth = collector.max_depth;
    Collected {
        findings: collector.finish(),
        depth,
    }
}

/// Drops a parsed tree `depth` levels deep (as [`Collected::depth`] measured) on a stack large
/// enough for its recursive drop glue: the current one when it has room, a new one otherwise.
pub(crate) fn drop_tree<T>(tree: T, depth: usize) {
    let needed = depth
        .saturating_mul(DROP_BYTES_PER_LEVEL)
        .saturating_add(DROP_BASE);
    stacker::maybe_grow(needed, needed, move || drop(tree));
}

/// CPython's tokenizer refuses more brackets open at once than this ("too many nested
/// parentheses", `MAXLEVEL`).
const MAX_NESTED_BRACKETS: usize = 200;
/// CPython refuses more f-strings (and t-strings) nested in each other than this ("too many
/// nested f-strings", `MAXFSTRINGLEVEL`).
const MAX_NESTED_FSTRINGS: usize = 150;
/// Code whose parse could need more stack than this is not parsed at all ([`parse`]).
const MAX_PARSE_STACK: usize = 1024 * 1024 * 1024;
/// Stack the parser needs whatever the code.
const PARSE_BASE: usize = 1024 * 1024;
/// Stack per byte of code for the parser's recursion outside its own guards (measured: at most
/// 59 bytes, in error recovery of `*(*(…))`, debug build).
const PARSE_BYTES_PER_SOURCE_BYTE: usize = 128;
/// Stack per `lambda` for the parser's unguarded recursion through lambda parameter defaults
/// (`lambda a=lambda a=…`; measured: 4.5 KiB per level, debug build).
const PARSE_BYTES_PER_LAMBDA: usize = 16 * 1024;

/// Code that is not parsed, because Python would not run it and parsing it could cost too much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unparseable {
    /// More than [`MAX_NESTED_BRACKETS`] brackets open at once (a syntax error in CPython).
    NestedBrackets,
    /// More than [`MAX_NESTED_FSTRINGS`] f-strings nested (a syntax error in CPython).
    NestedFStrings,
    /// The parse could need more than [`MAX_PARSE_STACK`] of stack.
    StackNeeded { bytes: usize, lambdas: usize },
}

/// Parses `source` as a module, whatever it contains, on a stack large enough for it.
///
/// First a lexer pass (linear, no recursion) refuses what CPython's tokenizer refuses too: more
/// than 200 nested brackets or 150 nested f-strings. Without that limit the parser takes
/// quadratic time on nested f-strings (80 KB of them: one second). Then the stack is sized from
/// the code's length and its number of `lambda`s: the parser grows its own stack for most
/// nesting, but nested lambda parameter defaults and some error recovery recurse unguarded.
/// Code that would need more than [`MAX_PARSE_STACK`] is refused instead.
///
/// Unlike `parse_module`, the tree of code that does not parse is returned with its errors
/// rather than dropped on the caller's stack.
pub(crate) fn parse(
    source: &str,
) -> Result<ruff_python_parser::Parsed<ast::ModModule>, Unparseable> {
    let lambdas = prescan(source)?;
    let needed = source
        .len()
        .saturating_mul(PARSE_BYTES_PER_SOURCE_BYTE)
        .saturating_add(lambdas.saturating_mul(PARSE_BYTES_PER_LAMBDA))
        .saturating_add(PARSE_BASE);
    if needed > MAX_PARSE_STACK {
        return Err(Unparseable::StackNeeded {
            bytes: source.len(),
            lambdas,
        });
    }
    Ok(stacker::maybe_grow(needed, needed, || {
        ruff_python_parser::parse_unchecked_source(source, ast::PySourceType::Python)
    }))
}

/// Checks the nesting limits on the token stream; returns the number of `lambda`s.
fn prescan(source: &str) -> Result<usize, Unparseable> {
    let mut lexer = ruff_python_parser::lexer::lex(source, ruff_python_parser::Mode::Module);
    let (mut brackets, mut fstrings, mut lambdas) = (0usize, 0usize, 0usize);
    loop {
        match lexer.next_token() {
            TokenKind::EndOfFile => return Ok(lambdas),
            TokenKind::Lpar | TokenKind::Lsqb | TokenKind::Lbrace => {
                brackets += 1;
                if brackets > MAX_NESTED_BRACKETS {
                    return Err(Unparseable::NestedBrackets);
                }
            }
            TokenKind::Rpar | TokenKind::Rsqb | TokenKind::Rbrace => {
                brackets = brackets.saturating_sub(1);
            }
            TokenKind::FStringStart | TokenKind::TStringStart => {
                fstrings += 1;
                if fstrings > MAX_NESTED_FSTRINGS {
                    return Err(Unparseable::NestedFStrings);
                }
            }
            TokenKind::FStringEnd | TokenKind::TStringEnd => {
                fstrings = fstrings.saturating_sub(1);
            }
            TokenKind::Lambda => lambdas += 1,
            _ => {}
        }
    }
}

/// A literal value of an argument, as far as the walk needs one.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Str(String),
    Int(Option<i64>),
    None,
    /// `globals()`: the calling module's own globals.
    OwnGlobals,
    Other,
}

#[derive(Debug, Clone)]
struct Arg {
    value: Value,
    offset: usize,
}

/// An argument of a call, looked up by position and keyword.
enum Param<'a> {
    Given(&'a Arg),
    Absent,
    /// Hidden behind `*args` or `**kwargs`.
    Unknown,
}

/// A call that is, or may turn out to be (once aliases are known), an import call.
#[derive(Debug, Clone)]
struct CallSite {
    callee: Callee,
    /// Positional arguments before the first `*args`.
    positional: Vec<Arg>,
    /// Whether a `*args` follows them.
    star: bool,
    keywords: Vec<(String, Arg)>,
    /// Whether a `**kwargs` is present.
    double_star: bool,
    offset: usize,
    /// The offset every finding of this call is reported at, inside an `exec` string.
    reported_at: Option<usize>,
    inside: Option<&'static str>,
}

impl CallSite {
    fn param(&self, index: usize, name: &str) -> Param<'_> {
        if let Some(arg) = self.positional.get(index) {
            return Param::Given(arg);
        }
        if let Some((_, arg)) = self.keywords.iter().find(|(keyword, _)| keyword == name) {
            return Param::Given(arg);
        }
        if self.star || self.double_star {
            Param::Unknown
        } else {
            Param::Absent
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Callee {
    Known(ImportFn),
    /// A plain name that is an import function if it is bound to one somewhere.
    Name(String),
}

#[derive(Debug, Default)]
struct Collector {
    findings: Vec<Finding>,
    calls: Vec<CallSite>,
    /// Names bound to an import function, or to another name (resolved at the end).
    aliases: HashMap<String, Vec<Callee>>,
    /// Inside an `exec` string: where to report, and how deep.
    reported_at: Option<usize>,
    inside: Option<&'static str>,
    exec_depth: u32,
    /// The current and deepest nesting of the walk.
    depth: usize,
    max_depth: usize,
}

impl Collector {
    /// Runs one level of the walk: counts it, and grows the stack when it runs low.
    fn nested(&mut self, walk: impl FnOnce(&mut Self)) {
        self.depth += 1;
        self.max_depth = self.max_depth.max(self.depth);
        stacker::maybe_grow(WALK_RED_ZONE, WALK_SEGMENT, || walk(self));
        self.depth -= 1;
    }

    fn offset(&self, node: &impl Ranged) -> usize {
        self.reported_at.unwrap_or_else(|| node.start().to_usize())
    }

    fn push(&mut self, offset: usize, what: What) {
        self.findings.push(Finding {
            offset,
            what,
            inside: self.inside,
        });
    }

    fn on_import(&mut self, import: &ast::StmtImport) {
        for alias in &import.names {
            let module = alias.name.as_str();
            self.push(
                self.offset(&alias.name),
                What::Module {
                    module: module.to_owned(),
                    submodules: Vec::new(),
                },
            );
        }
    }

    fn on_import_from(&mut self, import: &ast::StmtImportFrom) {
        // Relative imports name the user's own files.
        if import.level > 0 {
            return;
        }
        let Some(module) = &import.module else {
            return;
        };
        let module_offset = self.offset(module);
        let module = module.as_str();
        let mut submodules = Vec::new();
        for alias in &import.names {
            let name = alias.name.as_str();
            if name != "*" {
                submodules.push(format!("{module}.{name}"));
            }
            if matches!(module, "importlib" | "builtins")
                && let Some(function) = ImportFn::from_name(name)
            {
                let bound = alias.asname.as_ref().unwrap_or(&alias.name);
                self.bind(bound.as_str(), Callee::Known(function));
            }
        }
        if import.names.iter().any(|alias| alias.name.as_str() == "*") {
            submodules.clear();
        }
        self.push(
            module_offset,
            What::Module {
                module: module.to_owned(),
                submodules,
            },
        );
    }

    /// `target = value`: remembers `target` when `value` is an import function.
    fn on_binding(&mut self, target: &Expr, value: &Expr) {
        if let Expr::Name(name) = target
            && let Some(callee) = callee_of(value)
        {
            self.bind(name.id.as_str(), callee);
        }
    }

    fn bind(&mut self, name: &str, callee: Callee) {
        self.aliases
            .entry(name.to_owned())
            .or_default()
            .push(callee);
    }

    fn on_call(&mut self, call: &ast::ExprCall) {
        if let Some(callee) = callee_of(&call.func) {
            self.calls.push(self.call_site(call, callee));
        }
        if let Expr::Name(name) = &*call.func
            && let Some(context) = exec_context(name.id.as_str())
        {
            self.follow_exec_string(call, context);
        }
    }

    fn call_site(&self, call: &ast::ExprCall, callee: Callee) -> CallSite {
        let mut positional = Vec::new();
        let mut star = false;
        for arg in &call.arguments.args {
            if matches!(arg, Expr::Starred(_)) {
                star = true;
            }
            if !star {
                positional.push(self.arg(arg));
            }
        }
        let mut keywords = Vec::new();
        let mut double_star = false;
        for keyword in &call.arguments.keywords {
            match &keyword.arg {
                Some(name) => keywords.push((name.as_str().to_owned(), self.arg(&keyword.value))),
                None => double_star = true,
            }
        }
        CallSite {
            callee,
            positional,
            star,
            keywords,
            double_star,
            offset: self.offset(call),
            reported_at: self.reported_at,
            inside: self.inside,
        }
    }

    fn arg(&self, expr: &Expr) -> Arg {
        Arg {
            value: value_of(expr),
            offset: self.offset(expr),
        }
    }

    /// `exec("import os")`: parses the literal and walks it as code.
    fn follow_exec_string(&mut self, call: &ast::ExprCall, context: &'static str) {
        let Some(Expr::StringLiteral(literal)) = call.arguments.args.first() else {
            return;
        };
        if self.exec_depth >= MAX_EXEC_DEPTH {
            return;
        }
        // Not parsed: Python would not run it either.
        let Ok(parsed) = parse(literal.value.to_str()) else {
            return;
        };
        if parsed.has_valid_syntax() {
            let saved = (self.reported_at, self.inside);
            self.reported_at = Some(self.offset(literal));
            self.inside = Some(self.inside.unwrap_or(context));
            self.exec_depth += 1;
            self.visit_body(&parsed.syntax().body);
            self.exec_depth -= 1;
            (self.reported_at, self.inside) = saved;
            drop_tree(parsed, self.max_depth);
        } else {
            // A string that does not parse raises SyntaxError at run time: nothing to import.
            // Its tree is only measured, so that it can be dropped safely.
            let mut measure = Collector {
                exec_depth: MAX_EXEC_DEPTH,
                ..Collector::default()
            };
            measure.visit_body(&parsed.syntax().body);
            drop_tree(parsed, measure.max_depth);
        }
    }

    /// Resolves the calls against the aliases and returns all findings in source order.
    fn finish(mut self) -> Vec<Finding> {
        for call in std::mem::take(&mut self.calls) {
            let Some(function) = self.resolve(&call.callee) else {
                continue;
            };
            let at = |arg: &Arg| call.reported_at.unwrap_or(arg.offset);
            let what = match classify(function, &call) {
                Outcome::Pass => continue,
                Outcome::Module(module, arg) => {
                    let offset = at(arg);
                    (
                        offset,
                        What::Module {
                            module,
                            submodules: Vec::new(),
                        },
                    )
                }
                Outcome::Dynamic(why, arg) => {
                    (arg.map_or(call.offset, at), What::Dynamic { function, why })
                }
            };
            self.findings.push(Finding {
                offset: what.0,
                what: what.1,
                inside: call.inside,
            });
        }
        // Stable: findings at one offset keep their walk order.
        self.findings.sort_by_key(|finding| finding.offset);
        self.findings
    }

    /// The import function `callee` may be: directly, by its own name, or through any of the
    /// bindings of its name (depth first; each name once, so `a = b; b = a` terminates).
    fn resolve(&self, callee: &Callee) -> Option<ImportFn> {
        let mut seen = HashSet::new();
        let mut stack = vec![callee];
        while let Some(callee) = stack.pop() {
            match callee {
                Callee::Known(function) => return Some(*function),
                Callee::Name(name) => {
                    if !seen.insert(name.as_str()) {
                        continue;
                    }
                    if let Some(function) = ImportFn::from_name(name) {
                        return Some(function);
                    }
                    stack.extend(self.aliases.get(name).into_iter().flatten());
                }
            }
        }
        None
    }
}

impl<'a> Visitor<'a> for Collector {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        self.nested(|this| this.on_stmt(stmt));
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        self.nested(|this| this.on_expr(expr));
    }

    // Patterns and f-string format specs nest without an expression or statement in between.
    fn visit_pattern(&mut self, pattern: &'a ast::Pattern) {
        self.nested(|this| visitor::walk_pattern(this, pattern));
    }

    fn visit_interpolated_string_element(&mut self, element: &'a ast::InterpolatedStringElement) {
        self.nested(|this| visitor::walk_interpolated_string_element(this, element));
    }
}

impl Collector {
    fn on_stmt(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Import(import) => self.on_import(import),
            Stmt::ImportFrom(import) => self.on_import_from(import),
            Stmt::Assign(assign) => {
                for target in &assign.targets {
                    self.on_binding(target, &assign.value);
                }
            }
            Stmt::AnnAssign(ast::StmtAnnAssign {
                target,
                value: Some(value),
                ..
            }) => self.on_binding(target, value),
            _ => {}
        }
        visitor::walk_stmt(self, stmt);
    }

    fn on_expr(&mut self, expr: &Expr) {
        match expr {
            Expr::Call(call) => self.on_call(call),
            Expr::Named(named) => self.on_binding(&named.target, &named.value),
            _ => {}
        }
        visitor::walk_expr(self, expr);
    }
}

/// The import function `expr` denotes, by shape, or the name to look up later.
fn callee_of(expr: &Expr) -> Option<Callee> {
    match expr {
        Expr::Name(name) => Some(Callee::Name(name.id.as_str().to_owned())),
        // `(f := importlib.import_module)("x")`
        Expr::Named(named) => callee_of(&named.value),
        Expr::Attribute(attribute) => {
            ImportFn::from_name(attribute.attr.as_str()).map(Callee::Known)
        }
        // `getattr(x, "__import__")`
        Expr::Call(call) => match (&*call.func, call.arguments.args.get(1)) {
            (Expr::Name(name), Some(Expr::StringLiteral(literal)))
                if name.id.as_str() == "getattr" =>
            {
                ImportFn::from_name(literal.value.to_str()).map(Callee::Known)
            }
            _ => None,
        },
        // `vars(builtins)["__import__"]`, `__builtins__.__dict__["import_module"]`
        Expr::Subscript(subscript) => match &*subscript.slice {
            Expr::StringLiteral(literal) => {
                ImportFn::from_name(literal.value.to_str()).map(Callee::Known)
            }
            _ => None,
        },
        _ => None,
    }
}

fn exec_context(name: &str) -> Option<&'static str> {
    match name {
        "exec" => Some("exec"),
        "eval" => Some("eval"),
        "compile" => Some("compile"),
        _ => None,
    }
}

fn value_of(expr: &Expr) -> Value {
    match expr {
        Expr::StringLiteral(literal) => Value::Str(literal.value.to_str().to_owned()),
        Expr::NumberLiteral(ast::ExprNumberLiteral {
            value: Number::Int(int),
            ..
        }) => Value::Int(int.as_i64()),
        Expr::NoneLiteral(_) => Value::None,
        Expr::Call(call)
            if call.arguments.is_empty()
                && matches!(&*call.func, Expr::Name(name) if name.id.as_str() == "globals") =>
        {
            Value::OwnGlobals
        }
        _ => Value::Other,
    }
}

/// What one import call imports.
enum Outcome<'a> {
    /// Nothing that needs a check: the call fails at run time, or is relative to the user's
    /// own package.
    Pass,
    /// The module, and the argument that names it.
    Module(String, &'a Arg),
    /// Known only at run time, because of this argument (none: hidden by `*`/`**`).
    Dynamic(Dynamic, Option<&'a Arg>),
}

fn classify(function: ImportFn, call: &CallSite) -> Outcome<'_> {
    let name = match call.param(0, "name") {
        // A TypeError at run time.
        Param::Absent => return Outcome::Pass,
        Param::Unknown => return Outcome::Dynamic(Dynamic::Name, None),
        Param::Given(arg) => match &arg.value {
            Value::Str(name) => (name.as_str(), arg),
            _ => return Outcome::Dynamic(Dynamic::Name, Some(arg)),
        },
    };
    match function {
        ImportFn::DunderImport => classify_dunder_import(call, name),
        ImportFn::ImportModule => classify_import_module(call, name),
    }
}

fn classify_dunder_import<'a>(
    call: &'a CallSite,
    (name, name_arg): (&str, &'a Arg),
) -> Outcome<'a> {
    match call.param(4, "level") {
        Param::Absent => {}
        Param::Unknown => return Outcome::Dynamic(Dynamic::Level, None),
        Param::Given(level) => match level.value {
            Value::Int(Some(0)) => {}
            // A ValueError at run time.
            Value::Int(Some(..0)) => return Outcome::Pass,
            // Relative to the package in `globals`: the caller's own unless others are given.
            Value::Int(Some(_)) => {
                return match call.param(1, "globals") {
                    Param::Absent => Outcome::Pass,
                    Param::Given(Arg {
                        value: Value::None | Value::OwnGlobals,
                        ..
                    }) => Outcome::Pass,
                    Param::Given(globals) => Outcome::Dynamic(Dynamic::Globals, Some(globals)),
                    Param::Unknown => Outcome::Dynamic(Dynamic::Globals, None),
                };
            }
            _ => return Outcome::Dynamic(Dynamic::Level, Some(level)),
        },
    }
    if name.is_empty() || name.starts_with('.') {
        // A ValueError or ImportError at run time.
        return Outcome::Pass;
    }
    Outcome::Module(name.to_owned(), name_arg)
}

fn classify_import_module<'a>(
    call: &'a CallSite,
    (name, name_arg): (&str, &'a Arg),
) -> Outcome<'a> {
    let relative = name.trim_start_matches('.');
    let level = name.len() - relative.len();
    if level == 0 {
        if name.is_empty() {
            return Outcome::Pass;
        }
        return Outcome::Module(name.to_owned(), name_arg);
    }
    match call.param(1, "package") {
        // A TypeError at run time: a relative name needs a package.
        Param::Absent => Outcome::Pass,
        Param::Unknown => Outcome::Dynamic(Dynamic::Package, None),
        Param::Given(package) => match &package.value {
            Value::None => Outcome::Pass,
            Value::Str(base) => match resolve_relative(relative, base, level) {
                Some(module) => Outcome::Module(module, package),
                None => Outcome::Pass,
            },
            _ => Outcome::Dynamic(Dynamic::Package, Some(package)),
        },
    }
}

/// `importlib._resolve_name`: `("path", "os", 1)` → `os.path`; `None` where Python raises.
fn resolve_relative(name: &str, package: &str, level: usize) -> Option<String> {
    if package.is_empty() {
        return None;
    }
    let bits: Vec<&str> = package.rsplitn(level, '.').collect();
    if bits.len() < level {
        return None;
    }
    let base = bits.last()?;
    Some(if name.is_empty() {
        (*base).to_owned()
    } else {
        format!("{base}.{name}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modules(source: &str) -> Vec<String> {
        let parsed = ruff_python_parser::parse_module(source).unwrap();
        collect(&parsed.syntax().body)
            .findings
            .into_iter()
            .map(|finding| match finding.what {
                What::Module { module, .. } => module,
                What::Dynamic { function, .. } => format!("<dynamic {}>", function.as_str()),
            })
            .collect()
    }

    #[test]
    fn static_imports_everywhere() {
        let source = r#"
import a
import b.c as d, e
from f.g import h
from . import mine
from .. import theirs
from .pkg import x
def fn(x=__import__("default_arg")):
    import in_function
    class C:
        import in_class
@__import__("decorator").wrap
def g(): pass
try:
    import in_try
except ImportError:
    import in_except
finally:
    import in_finally
if True:
    import in_if
else:
    import in_else
with open("x") as f:
    import in_with
while False:
    import in_while
for i in []:
    import in_for
match 1:
    case 1:
        import in_match
lam = lambda: __import__("in_lambda")
comp = [__import__("in_comprehension") for _ in range(1)]
s = f"{__import__('in_fstring')}"
"#;
        assert_eq!(
            modules(source),
            [
                "a",
                "b.c",
                "e",
                "f.g",
                "default_arg",
                "in_function",
                "in_class",
                "decorator",
                "in_try",
                "in_except",
                "in_finally",
                "in_if",
                "in_else",
                "in_with",
                "in_while",
                "in_for",
                "in_match",
                "in_lambda",
                "in_comprehension",
                "in_fstring",
            ]
        );
    }

    #[test]
    fn import_functions_by_shape_and_alias() {
        let source = r#"
importlib.import_module("m1")
il.import_module("m2")
import_module("m3")
builtins.__import__("m4")
__builtins__.__import__("m5")
getattr(__builtins__, "__import__")("m6")
vars(builtins)["__import__"]("m7")
importlib.__import__("m8")
late("m9")
from importlib import import_module as late
f = __import__
g = f
g("m10")
(h := importlib.import_module)("m11")
not_an_import("m12")
"#;
        assert_eq!(
            modules(source),
            [
                "m1",
                "m2",
                "m3",
                "m4",
                "m5",
                "m6",
                "m7",
                "m8",
                "m9",
                "importlib",
                "m10",
                "m11"
            ]
        );
    }

    #[test]
    fn alias_cycles_terminate() {
        assert_eq!(modules("a = b\nb = a\na('x')\n"), Vec::<String>::new());
    }

    #[test]
    fn dynamic_arguments() {
        assert_eq!(
            modules("__import__('o' + 's')\nimport_module(name)\n__import__(*args)\n"),
            [
                "<dynamic __import__>",
                "<dynamic import_module>",
                "<dynamic __import__>"
            ]
        );
        // Literal and implicitly concatenated names are static.
        assert_eq!(modules("__import__('o' 's')\n"), ["os"]);
        // f-strings are not literals, even without placeholders.
        assert_eq!(modules("__import__(f'os')\n"), ["<dynamic __import__>"]);
    }

    #[test]
    fn dunder_import_levels() {
        assert_eq!(modules("__import__('x', level=0)\n"), ["x"]);
        assert_eq!(
            modules("__import__('x', globals(), None, [], 1)\n"),
            Vec::<String>::new()
        );
        assert_eq!(modules("__import__('x', level=1)\n"), Vec::<String>::new());
        assert_eq!(
            modules("__import__('path', {'__package__': 'os'}, None, [], 1)\n"),
            ["<dynamic __import__>"]
        );
        assert_eq!(
            modules("__import__('x', level=n)\n"),
            ["<dynamic __import__>"]
        );
        assert_eq!(modules("__import__('x', **kw)\n"), ["<dynamic __import__>"]);
        assert_eq!(modules("__import__('')\n"), Vec::<String>::new());
    }

    #[test]
    fn import_module_relative_names() {
        assert_eq!(modules("import_module('.path', 'os')\n"), ["os.path"]);
        assert_eq!(
            modules("import_module('..x', package='a.b.c')\n"),
            ["a.b.x"]
        );
        assert_eq!(modules("import_module('.', 'a.b')\n"), ["a.b"]);
        assert_eq!(modules("import_module('.x')\n"), Vec::<String>::new());
        assert_eq!(
            modules("import_module('...x', 'a')\n"),
            Vec::<String>::new()
        );
        assert_eq!(
            modules("import_module('.x', pkg)\n"),
            ["<dynamic import_module>"]
        );
        assert_eq!(modules("import_module('x', **kw)\n"), ["x"]);
        assert_eq!(
            modules("import_module('.x', **kw)\n"),
            ["<dynamic import_module>"]
        );
    }

    #[test]
    fn exec_strings_are_walked() {
        assert_eq!(modules("exec('import os')\n"), ["os"]);
        assert_eq!(modules("eval(\"__import__('socket')\")\n"), ["socket"]);
        assert_eq!(
            modules("exec(\"exec('import subprocess')\")\n"),
            ["subprocess"]
        );
        assert_eq!(modules("exec('import (')\n"), Vec::<String>::new());
        assert_eq!(modules("exec(code)\n"), Vec::<String>::new());
    }

    #[test]
    fn resolve_relative_matches_importlib() {
        assert_eq!(
            resolve_relative("path", "os", 1).as_deref(),
            Some("os.path")
        );
        assert_eq!(resolve_relative("x", "a.b.c", 2).as_deref(), Some("a.b.x"));
        assert_eq!(resolve_relative("", "a.b", 1).as_deref(), Some("a.b"));
        assert_eq!(resolve_relative("x", "a.b", 3), None);
        assert_eq!(resolve_relative("x", "", 1), None);
    }
}
