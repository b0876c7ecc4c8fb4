"use strict";

// Extensions of the stock query engine (@zeit/cosmosdb-query). It parses SQL
// with a PEG parser into an AST, turns the AST into JavaScript and runs it
// with a table of built-in functions ($b). We extend it in two places:
//
//  - parse(): "x NOT IN (...)" does not parse, so the text is rewritten to
//    "x IN (<marker>, ...)" before parsing and the marked IN nodes are negated
//    in the AST afterwards. Every IN becomes a call to a built-in that follows
//    Cosmos DB semantics (an undefined operand gives undefined, not false).
//  - built-in functions: STRINGEQUALS, and the optional ignore-case argument
//    of STARTSWITH, ENDSWITH and CONTAINS.

const { dependency } = require("./stock");

const parser = dependency("@zeit/cosmosdb-query/lib/parser");
const builtins = dependency("@zeit/cosmosdb-query/lib/builtin-functions");
const helpers = dependency("@zeit/cosmosdb-query/lib/helpers");

const NOT_IN_MARKER = "__opstatus_dev_not_in__";
// The transformer upper-cases built-in names, so this must be upper case.
const IN_FUNCTION = "OPSTATUS_DEV_IN";

// String literals are copied untouched; only the text between them changes.
const STRING_LITERAL = /('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")/;
const NOT_IN = /\bNOT\s+IN\s*\(\s*(\))?/gi;

function rewriteNotIn(sql) {
  return sql
    .split(STRING_LITERAL)
    .map((part, i) =>
      i % 2 === 1
        ? part
        : part.replace(NOT_IN, (match, emptyList) =>
            emptyList ? `IN ("${NOT_IN_MARKER}")` : `IN ("${NOT_IN_MARKER}", `
          )
    )
    .join("");
}

function isMarker(node) {
  return node && node.type === "string_constant" && node.value === NOT_IN_MARKER;
}

// Replaces every IN node of the AST, bottom-up.
function rewriteIn(node) {
  if (Array.isArray(node)) return node.map(rewriteIn);
  if (!node || typeof node !== "object") return node;
  const out = {};
  Object.keys(node).forEach(key => {
    out[key] = rewriteIn(node[key]);
  });
  if (out.type !== "scalar_in_expression") return out;

  const negated = out.list.length > 0 && isMarker(out.list[0]);
  const list = negated ? out.list.slice(1) : out.list;
  const call = {
    type: "scalar_function_expression",
    name: { type: "identifier", name: IN_FUNCTION },
    arguments: [out.value, ...list]
  };
  return negated
    ? { type: "scalar_unary_expression", operator: "NOT", argument: call }
    : call;
}

// Returns a string function of (a, b[, ignoreCase]) that, as in Cosmos DB,
// gives undefined when an argument has the wrong type.
function stringPredicate(test) {
  return (a, b, ignoreCase = false) => {
    if (
      typeof a !== "string" ||
      typeof b !== "string" ||
      typeof ignoreCase !== "boolean"
    ) {
      return undefined;
    }
    return ignoreCase
      ? test(a.toLowerCase(), b.toLowerCase())
      : test(a, b);
  };
}

let installed = false;

/** Installs the query language extensions (idempotent). */
function install() {
  if (installed) return;
  installed = true;

  const parse = parser.parse.bind(parser);
  parser.parse = (text, options) => rewriteIn(parse(rewriteNotIn(text), options));

  builtins[IN_FUNCTION] = (value, ...list) =>
    typeof value === "undefined"
      ? undefined
      : list.some(item => helpers.equal(value, item) === true);
  builtins.STRINGEQUALS = stringPredicate((a, b) => a === b);
  builtins.STARTSWITH = stringPredicate((a, b) => a.startsWith(b));
  builtins.ENDSWITH = stringPredicate((a, b) => a.endsWith(b));
  builtins.CONTAINS = stringPredicate((a, b) => a.includes(b));
}

module.exports = { install };
