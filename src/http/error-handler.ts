import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isDatabaseUnavailable } from '../db/database.ts';
import { AppError, errorEnvelope, type ValidationDetail } from './errors.ts';

interface AjvIssue {
  keyword: string;
  instancePath: string;
  schemaPath: string;
  message?: string;
  params?: Record<string, unknown>;
  /** The failing keyword's schema value (Ajv's verbose option): a union's branches for anyOf. */
  schema?: unknown;
}

function valueAt(root: unknown, path: (string | number)[]): unknown {
  let current = root;
  for (const part of path) {
    if (current === null || typeof current !== 'object') return null;
    current = (current as Record<string | number, unknown>)[part];
  }
  return current === undefined ? null : current;
}

type Branch = { const?: unknown; type?: unknown; anyOf?: Branch[] };

/** The values a union of literals allows (null as a value when it is Nullable); undefined for any other union. */
function literalValues(branches: Branch[]): unknown[] | undefined {
  const values: unknown[] = [];
  for (const branch of branches) {
    if (branch === null || typeof branch !== 'object') return undefined;
    if ('const' in branch) values.push(branch.const);
    else if (branch.type === 'null' && Object.keys(branch).length === 1) values.push(null);
    else if (Array.isArray(branch.anyOf)) {
      const nested = literalValues(branch.anyOf);
      if (!nested) return undefined;
      values.push(...nested);
    } else return undefined;
  }
  return values;
}

function enumIssue(issue: AjvIssue): AjvIssue | undefined {
  const values = issue.keyword === 'enum' ? issue.params?.allowedValues : issue.keyword === 'anyOf' && Array.isArray(issue.schema) ? literalValues(issue.schema) : undefined;
  if (!Array.isArray(values) || values.length === 0) return undefined;
  const named = [...new Set(values.filter((v) => v !== null))].map((v) => (typeof v === 'string' ? v : JSON.stringify(v))).join(', ');
  const message = `must be ${values.includes(null) ? 'null or ' : ''}one of: ${named}`;
  return { keyword: 'enum', instancePath: issue.instancePath, schemaPath: issue.schemaPath, message, params: { allowedValues: values } };
}

/**
 * A union of literals (TypeBox compiles it to anyOf of const) fails with one issue per allowed
 * value ("must be equal to constant", or "must be string" for a number), one "must match a schema
 * in anyOf" per union level and, when Nullable, a "must be null": the issues under such a union
 * become one issue naming the allowed values (Ajv's own enum keyword reads the same). Other issues
 * are kept in their order. Reads the union's branches from the issue (Ajv's verbose option).
 */
export function collapseEnumIssues(issues: AjvIssue[]): AjvIssue[] {
  const enums = issues.map(enumIssue).filter((issue): issue is AjvIssue => issue !== undefined);
  // The outermost union of a field (reported last, with every value) stands for those inside it.
  const outermost = enums.filter((e) => !enums.some((other) => other !== e && other.instancePath === e.instancePath && e.schemaPath.startsWith(`${other.schemaPath}/`)));
  const covering = (issue: AjvIssue) => outermost.find((e) => e.instancePath === issue.instancePath && (issue.schemaPath === e.schemaPath || issue.schemaPath.startsWith(`${e.schemaPath}/`)));
  const collapsed: AjvIssue[] = [];
  for (const issue of issues) {
    const union = covering(issue);
    if (!union) collapsed.push(issue);
    else if (!collapsed.includes(union)) collapsed.push(union);
  }
  return collapsed;
}

function toDetails(issues: AjvIssue[], context: string, request: FastifyRequest): ValidationDetail[] {
  const source = context === 'querystring' ? 'query' : context;
  const root = (request as unknown as Record<string, unknown>)[context === 'querystring' ? 'query' : context];
  return collapseEnumIssues(issues).map((issue) => {
    const path = issue.instancePath.split('/').slice(1).map((p) => (/^\d+$/.test(p) ? Number(p) : p.replace(/~1/g, '/').replace(/~0/g, '~')));
    if (issue.keyword === 'required' && typeof issue.params?.missingProperty === 'string') path.push(issue.params.missingProperty);
    if (issue.keyword === 'additionalProperties' && typeof issue.params?.additionalProperty === 'string') path.push(issue.params.additionalProperty);
    const field = path.length > 0 ? path.join('.') : source;
    return {
      type: issue.keyword === 'required' ? 'missing' : issue.keyword,
      loc: [source, ...path],
      msg: issue.keyword === 'required' ? 'Field required' : `${field} ${issue.message ?? 'is invalid'}`,
      input: issue.keyword === 'required' ? null : valueAt(root, path),
    };
  });
}

/** Framework errors that are the caller's fault, mapped to the spec's statuses. */
export const CLIENT_ERRORS: Record<string, { status: number; message: string }> = {
  FST_ERR_CTP_INVALID_JSON_BODY: { status: 400, message: 'Malformed JSON body' },
  FST_ERR_CTP_EMPTY_JSON_BODY: { status: 400, message: 'Request body is empty but Content-Type is application/json' },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { status: 415, message: 'Unsupported Content-Type' },
  FST_ERR_CTP_BODY_TOO_LARGE: { status: 413, message: 'Request body is too large' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { status: 400, message: 'Invalid Content-Length' },
  FST_ERR_CTP_INVALID_TYPE: { status: 400, message: 'Invalid Content-Type' },
  FST_INVALID_MULTIPART_CONTENT_TYPE: { status: 400, message: 'Request is not multipart' },
  FST_REQ_FILE_TOO_LARGE: { status: 413, message: 'File is too large' },
  FST_PARTS_LIMIT: { status: 413, message: 'Too many parts' },
  FST_FILES_LIMIT: { status: 413, message: 'Too many files' },
  FST_FIELDS_LIMIT: { status: 413, message: 'Too many fields' },
};

export function sendError(reply: FastifyReply, error: AppError): FastifyReply {
  if (error.retryAfterSeconds !== undefined) reply.header('retry-after', String(Math.max(1, Math.ceil(error.retryAfterSeconds))));
  // Spec 7: every 429 carries Retry-After (the rate limiter sets its own, more precise value).
  if (error.status === 429 && !reply.hasHeader('retry-after')) reply.header('retry-after', '1');
  return reply.code(error.status).type('application/json').send(errorEnvelope(reply.request.id, error.code, error.message, error.extras));
}

let lastUnavailableLog = 0;

type FrameworkError = FastifyError & { validation?: AjvIssue[]; validationContext?: string };

/** Turns any error into the envelope; bugs become INTERNAL_ERROR and are logged once with the request id. */
export function handleError(error: FrameworkError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  if (error instanceof AppError) return sendError(reply, error);
  if (error.validation) {
    const details = toDetails(error.validation, error.validationContext ?? 'body', request);
    const message = details.length === 1 ? details[0].msg : 'Request validation failed';
    return sendError(reply, new AppError('VALIDATION_ERROR', message, { details }));
  }
  const known = error.code ? CLIENT_ERRORS[error.code] : undefined;
  if (known) return sendError(reply, new AppError('VALIDATION_ERROR', known.message, {}, known.status));
  if (error instanceof SyntaxError || (error.statusCode === 400 && !error.code?.startsWith('FST_ERR'))) {
    return sendError(reply, new AppError('VALIDATION_ERROR', 'Malformed request body'));
  }
  if (isDatabaseUnavailable(error)) {
    // Expected while the database restarts or fails over: retryable, logged once per outage burst.
    if (Date.now() - lastUnavailableLog > 10_000) {
      lastUnavailableLog = Date.now();
      request.log.warn({ err: error.message, code: error.code }, 'database unavailable; answering 503 until it returns');
    }
    reply.header('retry-after', '1');
    return sendError(reply, new AppError('INTERNAL_ERROR', 'The service is temporarily unavailable. Retry with backoff.', {}, 503));
  }
  request.log.error({ err: error, request_id: request.id }, 'unhandled error');
  return sendError(reply, new AppError('INTERNAL_ERROR', 'An unexpected error occurred. Retry with backoff.'));
}

export function installErrorHandling(app: FastifyInstance, knownRoutes: () => { method: string; pattern: RegExp }[]) {
  app.setErrorHandler(handleError);

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0];
    const allowed = knownRoutes().filter((r) => r.pattern.test(path)).map((r) => r.method);
    if (allowed.length > 0 && !allowed.includes(request.method)) {
      reply.header('allow', [...new Set(allowed)].join(', '));
      return sendError(reply, new AppError('NOT_FOUND', `Method ${request.method} is not allowed on ${path}`, {}, 405));
    }
    return sendError(reply, new AppError('NOT_FOUND', `Route ${request.method} ${path} not found`));
  });
}
