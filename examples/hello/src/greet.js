export function greet(greeting, name) {
  return `${greeting}, ${name}`;
}
