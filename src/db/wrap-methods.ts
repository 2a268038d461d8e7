/**
 * A store whose every method call goes through `wrap` (given the method's name and the call), the
 * store's other fields as they are. Wrapped once per method, not on every call: some methods run
 * on every request.
 */
export function wrapMethods<T extends object>(store: T, wrap: (name: PropertyKey, call: () => unknown) => unknown): T {
  const wrapped = new Map<PropertyKey, (...args: unknown[]) => unknown>();
  return new Proxy(store, {
    get(target, name, receiver) {
      const value: unknown = Reflect.get(target, name, receiver);
      if (typeof value !== "function") return value;
      let method = wrapped.get(name);
      if (!method) wrapped.set(name, (method = (...args: unknown[]) => wrap(name, () => value.apply(target, args))));
      return method;
    },
  });
}
