export function f() {
  return 1;
}
export const g = (a, b => a;
