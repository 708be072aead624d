// What a route's config may say, read by the app's hooks (app.ts): its own file, so the
// routes that set it (openai.ts) and the app that reads it import it from below.

/** `rpc`, the RPC a transcoded route serves; `open`, no token needed (pages and documents
 * that hold no data). */
export interface RouteConfig {
  rpc?: string;
  open?: boolean;
}
