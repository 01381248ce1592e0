export default function greet(name) {
  return "hello " + name;
}
