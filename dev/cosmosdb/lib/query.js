"use strict";

// Extensions of the stock query engine (@zeit/cosmosdb-query). It parses SQL
// with a PEG parser into an AST, turns the AST into JavaScript and runs it
// with a table of built-in functions ($b) and helpers ($h). We extend it in
// these places:
//
//  - parse(): "x NOT IN (...)" does not parse, so the text is rewritten to
//    "x IN (<marker>, ...)" before parsing and the marked IN nodes are negated
//    in the AST afterwards. Every IN becomes a call to a built-in that follows
//    Cosmos DB semantics (an undefined operand gives undefined, not false).
//  - built-in functions: STRINGEQUALS, and the optional ignore-case argument
//    of STARTSWITH, ENDSWITH and CONTAINS.
//  - speed: the generated code gathers the FROM rows with
//    reduce(($, c) => [...$, { c }], []), and the helpers strip undefined
//    from a result array the same way, each copying the whole array for
//    every row: O(N^2), 20 s for a query over 30,000 items. transform() now
//    appends to the accumulator instead, and stripUndefined() pushes. A
//    query without ORDER BY sorts its rows by _rid; sort() reads each row's
//    _rid once instead of twice per comparison (40% of the query's time).
//    The executor compiled a query's generated code with new Function at
//    every run; it now compiles each text once (compiledExecutor).

const { dependency } = require("./stock");

const parser = dependency("@zeit/cosmosdb-query/lib/parser");
const builtins = dependency("@zeit/cosmosdb-query/lib/builtin-functions");
const helpers = dependency("@zeit/cosmosdb-query/lib/helpers");
const transformer = dependency("@zeit/cosmosdb-query/lib/transformer");
const executor = dependency("@zeit/cosmosdb-query/lib/executor");
const aggregates = dependency("@zeit/cosmosdb-query/lib/aggregate-functions");

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

// The helper (in $h) that replaces "[...$, a, ...b]" in a reduce callback:
// it appends the parts to the accumulator in place and returns it. Each part
// is an iterable, as a spread element takes.
const APPEND_HELPER = "opstatusDevAppend";

function append(acc, ...parts) {
  parts.forEach(part => {
    for (const value of part) acc.push(value);
  });
  return acc;
}

const isAccumulator = node =>
  node && node.type === "Identifier" && node.name === "$";

// "[...$, a, ...b]" -> "$h.opstatusDevAppend($, [a], b)", or null when the
// node is not an array that starts with the spread accumulator.
function appendCall(node) {
  if (
    !node ||
    node.type !== "ArrayExpression" ||
    node.elements.length === 0 ||
    !node.elements[0] ||
    node.elements[0].type !== "SpreadElement" ||
    !isAccumulator(node.elements[0].argument)
  ) {
    return null;
  }
  const parts = node.elements.slice(1).map(element =>
    element && element.type === "SpreadElement"
      ? element.argument
      : { type: "ArrayExpression", elements: [element] }
  );
  return {
    type: "CallExpression",
    callee: {
      type: "MemberExpression",
      object: { type: "Identifier", name: "$h" },
      property: { type: "Identifier", name: APPEND_HELPER },
      computed: false
    },
    arguments: [{ type: "Identifier", name: "$" }, ...parts]
  };
}

// Whether node is "<x>.reduce(($, ...) => ..., [])": the only reduce calls the
// transformer writes, whose accumulator starts as a fresh array each time,
// so appending to it in place is safe.
function isRowReduce(node) {
  if (
    node.type !== "CallExpression" ||
    !node.callee ||
    node.callee.type !== "MemberExpression" ||
    node.callee.computed ||
    !node.callee.property ||
    node.callee.property.name !== "reduce" ||
    node.arguments.length !== 2
  ) {
    return false;
  }
  const [callback, initial] = node.arguments;
  return (
    callback.type === "ArrowFunctionExpression" &&
    callback.params.length > 0 &&
    isAccumulator(callback.params[0]) &&
    initial.type === "ArrayExpression" &&
    initial.elements.length === 0
  );
}

// Rewrites, in place, the bodies of the row reduces of a JavaScript AST:
// "[...$, x]" and "cond ? [...$, x] : $".
function appendInPlace(node) {
  if (Array.isArray(node)) {
    node.forEach(appendInPlace);
    return node;
  }
  if (!node || typeof node !== "object") return node;
  Object.keys(node).forEach(key => appendInPlace(node[key]));
  if (!isRowReduce(node)) return node;
  const callback = node.arguments[0];
  const { body } = callback;
  const call = appendCall(body);
  if (call) {
    callback.body = call;
  } else if (body.type === "ConditionalExpression") {
    const consequent = appendCall(body.consequent);
    if (consequent) body.consequent = consequent;
  }
  return node;
}

// helpers.stripUndefined with a linear array case; the object case is the
// stock one, unchanged.
function stripUndefinedLinear(stock) {
  return function stripUndefined(obj) {
    if (!Array.isArray(obj)) return stock(obj);
    const out = [];
    obj.forEach(value => {
      if (typeof value !== "undefined") out.push(helpers.stripUndefined(value));
    });
    return out;
  };
}

// helpers.sort without ORDER BY: rows in _rid order, ties in their order (a
// stable sort, as the stock one). The _rids are read once; any other case
// (ORDER BY, a _rid that is not a string, a row without one) is stock.
function sortByRidOnce(stock) {
  return function sort(collection, getRid, compositeIndexes, ...orders) {
    if (orders.length > 0 || collection.length < 2) {
      return stock(collection, getRid, compositeIndexes, ...orders);
    }
    let keyed;
    try {
      keyed = collection.map(row => ({ rid: getRid(row), row }));
    } catch (err) {
      return stock(collection, getRid, compositeIndexes, ...orders);
    }
    if (!keyed.every(({ rid }) => typeof rid === "string")) {
      return stock(collection, getRid, compositeIndexes, ...orders);
    }
    keyed.sort((a, b) => {
      if (a.rid === b.rid) return 0;
      return a.rid < b.rid ? -1 : 1;
    });
    return keyed.map(({ row }) => row);
  };
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

// The stock executor with each generated code compiled once: it ran
// new Function on the code at every query. The compiled function holds no
// state of its own (the rows, parameters and helpers are its arguments),
// so one serves every run of its text. The texts are few (the clients'
// queries take parameters); the cache is bounded all the same.
const MAX_COMPILED = 1000;

function compiledExecutor() {
  const compiled = new Map(); // code -> function
  return (collection, { code, parameters, udf = {}, maxItemCount, continuation, compositeIndexes }) => {
    let execute = compiled.get(code);
    if (!execute) {
      if (compiled.size >= MAX_COMPILED) compiled.clear();
      // eslint-disable-next-line no-new-func
      execute = new Function(`"use strict";return (${code})`)();
      compiled.set(code, execute);
    }
    const params = {};
    (parameters || []).forEach(({ name, value }) => {
      params[name.slice(1)] = value;
    });
    return execute(aggregates, builtins, collection, helpers, udf, params, maxItemCount, continuation, compositeIndexes);
  };
}

let installed = false;

/** Installs the query language extensions (idempotent). */
function install() {
  if (installed) return;
  installed = true;

  const parse = parser.parse.bind(parser);
  parser.parse = (text, options) => rewriteIn(parse(rewriteNotIn(text), options));

  const transform = transformer.default;
  transformer.default = (...args) => appendInPlace(transform(...args));
  helpers[APPEND_HELPER] = append;
  helpers.stripUndefined = stripUndefinedLinear(helpers.stripUndefined);
  helpers.sort = sortByRidOnce(helpers.sort);
  executor.default = compiledExecutor();

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
