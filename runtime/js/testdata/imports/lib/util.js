import greet from "../helper.js";

export function double(n) {
  return n * 2;
}

export const twice = greet("twice");

export function explode() {
  throw new TypeError("exploded in util");
}
