// Mutation sites of JavaScript modules, found with acorn (the parser webpack, rollup and eslint's espree use).
// stdin: {"acorn": "/path/to/node_modules/acorn", "files": {"path": "source", ...}}
// stdout: [{"path", "technique", "start", "end", "replacement", "line", "end_line", "qualname"}, ...]
// Offsets are acorn's: UTF-16 code units into the source (js_mutations.py applies them as such). Only
// functions' bodies get sites: module-level code is set-up that every test runs, not a subtle bug.
'use strict';
const fs = require('fs');
const input = JSON.parse(fs.readFileSync(0, 'utf8'));
const acorn = require(input.acorn);

const SWAPS = {
  change_binary_operator: { '+': '-', '-': '+', '*': '/', '/': '*', '%': '*', '<<': '>>', '>>': '<<', '&': '|', '|': '&' },
  change_comparison_operator: { '===': '!==', '!==': '===', '==': '!=', '!=': '==', '<': '<=', '<=': '<', '>': '>=', '>=': '>' },
  change_boolean_operator: { '&&': '||', '||': '&&', '??': '||' },
};
const NON_COMMUTATIVE = new Set(['-', '/', '%', '<', '<=', '>', '>=', 'instanceof', 'in', '<<', '>>']);

function parse(source) {
  const options = { ecmaVersion: 'latest', allowHashBang: true, allowReturnOutsideFunction: true, locations: true };
  try {
    return acorn.parse(source, { ...options, sourceType: 'script' });
  } catch (e) {
    return acorn.parse(source, { ...options, sourceType: 'module' });
  }
}

function nameOf(node, parent) {
  if (node.id && node.id.name) return node.id.name;
  if (parent && parent.type === 'VariableDeclarator' && parent.id.name) return parent.id.name;
  if (parent && (parent.type === 'Property' || parent.type === 'MethodDefinition') && parent.key) {
    return parent.key.name || String(parent.key.value);
  }
  if (parent && parent.type === 'AssignmentExpression') {
    const left = parent.left;
    return left.type === 'MemberExpression' && left.property ? left.property.name || '' : left.name || '';
  }
  return '<anonymous>';
}

function sites(path, source) {
  const out = [];
  const add = (technique, node, start, end, replacement, qualname) => out.push({
    path, technique, start, end, replacement, line: node.loc.start.line, end_line: node.loc.end.line, qualname,
  });
  const text = (n) => source.slice(n.start, n.end);
  // the operator's own text between the operands (comments may sit there too: find it after the left one)
  const operator = (n) => {
    const at = source.indexOf(n.operator, n.left.end);
    return at >= n.left.end && at < n.right.start ? at : -1;
  };
  function visit(node, parent, names) {
    if (!node || typeof node.type !== 'string') return;
    const isFunction = /Function/.test(node.type);
    const inner = isFunction ? [...names, nameOf(node, parent)] : names;
    const qualname = inner.join('.');
    if (inner.length > 0) {
      if (node.type === 'BinaryExpression' || node.type === 'LogicalExpression') {
        const at = operator(node);
        for (const [technique, table] of Object.entries(SWAPS)) {
          if (at >= 0 && table[node.operator] && !(node.operator === '+' && isStringy(node))) {
            add(technique, node, at, at + node.operator.length, table[node.operator], qualname);
          }
        }
        if (NON_COMMUTATIVE.has(node.operator) && text(node.left) !== text(node.right)) {
          add('swap_operands', node, node.start, node.end,
            text(node.right) + source.slice(node.left.end, node.right.start) + text(node.left), qualname);
        }
      } else if (node.type === 'Literal' && typeof node.value === 'number' && /^\d+$/.test(node.raw)) {
        add('change_constant', node, node.start, node.end, String(node.value + 1), qualname);
      } else if (node.type === 'Literal' && typeof node.value === 'boolean') {
        add('change_constant', node, node.start, node.end, String(!node.value), qualname);
      } else if (node.type === 'IfStatement') {
        add('invert_if', node, node.test.start, node.test.end, `!(${text(node.test)})`, qualname);
        if (!node.alternate) add('remove_conditional', node, node.start, node.end, ';', qualname);
      } else if (node.type === 'ExpressionStatement' && node.expression.type === 'AssignmentExpression') {
        add('remove_assignment', node, node.start, node.end, ';', qualname);
      } else if (node.type === 'UnaryExpression' && node.operator === '!' && node.argument.type !== 'UnaryExpression') {
        add('remove_negation', node, node.start, node.end, `(${text(node.argument)})`, qualname);
      }
    }
    for (const [key, value] of Object.entries(node)) {
      if (key === 'loc') continue;
      if (Array.isArray(value)) value.forEach((child) => visit(child, node, inner));
      else if (value && typeof value.type === 'string') visit(value, node, inner);
    }
  }
  function isStringy(node) {
    const literal = (n) => n.type === 'TemplateLiteral' || (n.type === 'Literal' && typeof n.value === 'string');
    return literal(node.left) || literal(node.right);
  }
  visit(parse(source), null, []);
  return out;
}

const result = [];
const errors = {};
for (const [path, source] of Object.entries(input.files)) {
  try {
    result.push(...sites(path, source));
  } catch (e) {
    errors[path] = String(e.message || e);
  }
}
process.stdout.write(JSON.stringify({ sites: result, errors }));
