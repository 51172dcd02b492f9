-- The renderer of todos as it was before issue 27 (supabase/schemas/70_rendering.sql at commit
-- fdb8ccc), and of comments, messages and conversations as they were before
-- app.comments_text (commit c40a629), app.messages_text (commit 55f023b) and
-- app.conversation_texts (commit 950c492): every page built as jsonb from the tables on every
-- read. test/render-once.test.ts
-- creates it in schema `reference` of its own database and requires the renderings kept on
-- write (app.todos_text and the cards) to give the same JSON, value for value. Copied, not
-- imported: it must not change when the product's renderer does. Helpers whose meaning did not
-- change (visibility rules, public ids, initials, colours) are the product's own.
set check_function_bodies = off;
create schema reference;
grant usage on schema reference to authenticated;

create function reference.image_urls(base_url text, folder text, key text)
returns jsonb
language sql
stable
parallel safe
as $$
  select case
    when key is null then jsonb_build_object(
      'small', base_url || '/assets/default-' || folder || '-small.png',
      'medium', base_url || '/assets/default-' || folder || '-medium.png',
      'large', base_url || '/assets/default-' || folder || '-large.png')
    else jsonb_build_object(
      'small', base_url || '/storage/' || key || '?size=small',
      'medium', base_url || '/storage/' || key || '?size=medium',
      'large', base_url || '/storage/' || key || '?size=large')
  end
$$;

create function reference.picture_urls(base_url text, folder text, key text, label text, color text)
returns jsonb
language sql
stable
parallel safe
as $$
  select case
    when key is not null then reference.image_urls(base_url, folder, key)
    else jsonb_build_object(
      'small', base_url || '/assets/' || folder || '/small/' || coalesce(upper(substring(color, '^#?([0-9A-Fa-f]{6})$')), '94A3B8') || '/' || app.initials(label) || '.png',
      'medium', base_url || '/assets/' || folder || '/medium/' || coalesce(upper(substring(color, '^#?([0-9A-Fa-f]{6})$')), '94A3B8') || '/' || app.initials(label) || '.png',
      'large', base_url || '/assets/' || folder || '/large/' || coalesce(upper(substring(color, '^#?([0-9A-Fa-f]{6})$')), '94A3B8') || '/' || app.initials(label) || '.png')
  end
$$;

create function reference.user_json_body(u app.users, local_today date, viewer_id uuid, base_url text, following boolean, follows_you boolean, follow_requested boolean)
returns jsonb
language sql
stable
parallel safe
as $$
  select jsonb_build_object(
    'id', app.to_public_id('user', u.id),
    'username', u.username,
    'streak', case when u.streak_last_day >= local_today - 1 then u.streak_length else 0 end,
    'best_streak', u.best_streak,
    'streaking', coalesce(u.streak_last_day >= local_today, false),
    'created_at', u.created_at,
    'updated_at', u.updated_at,
    'privacy', u.privacy,
    'protected', u.privacy <> 'public',
    'first_name', u.first_name,
    'last_name', u.last_name,
    'bio', u.bio,
    'location', u.location,
    'website_url', u.website_url,
    'todos_count', u.todos_count,
    'time_zone', u.time_zone,
    'url', app.web_url() || '/@' || u.username,
    'avatar', reference.picture_urls(base_url, 'avatar', u.avatar_key, coalesce(nullif(btrim(concat_ws(' ', u.first_name, u.last_name)), ''), u.username), coalesce(u.header_color, app.default_header_color(u.id))),
    'header', case when u.header_key is not null then reference.image_urls(base_url, 'header', u.header_key) end,
    'header_color', coalesce(u.header_color, app.default_header_color(u.id)),
    'followers_count', u.followers_count,
    'following', following,
    'follows_you', follows_you,
    'follow_requested', follow_requested,
    'pro', u.subscription_active
  ) || case when u.id = viewer_id then jsonb_build_object('dismissed_time_zone', u.dismissed_time_zone) else '{}'::jsonb end
$$;

create function reference.mentioned_user_json_body(u app.users, base_url text)
returns jsonb
language sql
stable
parallel safe
as $$
  select jsonb_build_object(
    'id', app.to_public_id('user', u.id),
    'username', u.username,
    'first_name', u.first_name,
    'last_name', u.last_name,
    'url', app.web_url() || '/@' || u.username,
    'avatar', reference.picture_urls(base_url, 'avatar', u.avatar_key, coalesce(nullif(btrim(concat_ws(' ', u.first_name, u.last_name)), ''), u.username), coalesce(u.header_color, app.default_header_color(u.id))))
$$;

create function reference.users_json(ids uuid[])
returns table(id uuid, body jsonb)
language plpgsql
stable
set search_path = ''
set plan_cache_mode = 'force_generic_plan'
as $$
declare
  viewer_id uuid := auth.uid();
  base_url text := app.public_url();
begin
  -- Profiles and follow relations are visible to every member, so this reads under the
  -- caller's policies (both are `true`; the viewer's own follow requests are visible to them).
  -- "Today" is computed once per time zone, not per user.
  return query
    with zones as materialized (
      select z.time_zone, (now() at time zone z.time_zone)::date as local_today
      from (select distinct u.time_zone from app.users u where u.id = any (ids)) z
    )
    select u.id, reference.user_json_body(u, z.local_today, viewer_id, base_url,
                                    fo.follower_id is not null, fy.follower_id is not null, fr.requester_id is not null)
    from app.users u
    join zones z on z.time_zone = u.time_zone
    left join app.user_follows fo on fo.follower_id = viewer_id and fo.followee_id = u.id
    left join app.user_follows fy on fy.follower_id = u.id and fy.followee_id = viewer_id
    left join app.user_follow_requests fr on fr.requester_id = viewer_id and fr.followee_id = u.id
    where u.id = any (ids);
end;
$$;

create function reference.project_json_body(p app.projects, base_url text, owner jsonb, makers jsonb, following boolean, follow_requested boolean, todos_count bigint)
returns jsonb
language sql
stable
parallel safe
as $$
  select jsonb_build_object(
    'id', app.to_public_id('proj', p.id),
    'slug', p.slug,
    'name', p.name,
    'pitch', p.pitch,
    'description', p.description,
    'created_at', p.created_at,
    'updated_at', p.updated_at,
    'hashtag', p.hashtag,
    'website_url', p.website_url,
    'github_url', p.github_url,
    'privacy', p.privacy,
    'protected', p.privacy = 'protected',
    'archived', p.archived,
    'url', app.web_url() || '/projects/' || coalesce(p.slug, app.to_public_id('proj', p.id)),
    'logo', reference.picture_urls(base_url, 'logo', p.logo_key, p.name, coalesce(p.header_color, app.default_header_color(p.id))),
    'header', case when p.header_key is not null then reference.image_urls(base_url, 'header', p.header_key) end,
    'header_color', coalesce(p.header_color, app.default_header_color(p.id)),
    'owner', owner,
    'makers', makers,
    'followers_count', p.followers_count,
    'todos_count', todos_count,
    'following', following,
    'follow_requested', follow_requested)
$$;

create function reference.projects_json(ids uuid[])
returns table(id uuid, body jsonb)
language plpgsql
stable
security definer
set search_path = ''
set plan_cache_mode = 'force_generic_plan'
as $$
declare
  viewer_id uuid := auth.uid();
  base_url text := app.public_url();
begin
  return query
    with listed as materialized (
      -- Visible: exactly the projects policy (app.can_see_project), checked once per project.
      select p.id, p.owner_id from app.projects p
      where p.id = any (ids) and app.can_see_project(p.id, p.privacy, viewer_id)
    ), makers as materialized (
      -- Makers and follows are visible with their (visible) project.
      select m.project_id, m.user_id, m.created_at from app.project_makers m
      where m.project_id in (select l.id from listed l) and m.accepted
    ), people as materialized (
      select pe.id, pe.body from reference.users_json(array(
        select l.owner_id from listed l union select m.user_id from makers m)) pe
    ), counted as materialized (
      select vt.project_id, vt.todos from app.visible_project_todos(array(select l.id from listed l)) vt
    )
    select p.id, reference.project_json_body(p, base_url,
      (select o.body from people o where o.id = p.owner_id),
      coalesce((select jsonb_agg(mu.body order by m.user_id = p.owner_id desc, m.created_at, lower(mu.body ->> 'username'))
                from makers m join people mu on mu.id = m.user_id where m.project_id = p.id), '[]'::jsonb),
      exists (select 1 from app.project_follows f where f.project_id = p.id and f.user_id = viewer_id),
      exists (select 1 from app.project_follow_requests r where r.user_id = viewer_id and r.project_id = p.id),
      coalesce((select c.todos from counted c where c.project_id = p.id), 0))
    from app.projects p
    where p.id in (select l.id from listed l);
end;
$$;

create function reference.mentioned_project_json_body(p app.projects, base_url text)
returns jsonb
language sql
stable
parallel safe
as $$
  select jsonb_build_object(
    'id', app.to_public_id('proj', p.id),
    'slug', p.slug,
    'name', p.name,
    'hashtag', p.hashtag,
    'url', app.web_url() || '/projects/' || coalesce(p.slug, app.to_public_id('proj', p.id)),
    'logo', reference.picture_urls(base_url, 'logo', p.logo_key, p.name, coalesce(p.header_color, app.default_header_color(p.id))))
$$;

create function reference.reaction_json_body(r app.reactions, reactor jsonb)
returns jsonb
language sql
stable
parallel safe
as $$
  select jsonb_build_object(
    'id', app.to_public_id('reac', r.id),
    'created_at', r.created_at,
    'reactable_type', case when r.todo_id is not null then 'Todo' else 'Comment' end,
    'reactable_id', case when r.todo_id is not null then app.to_public_id('todo', r.todo_id) else app.to_public_id('comm', r.comment_id) end,
    'reactor', reactor)
$$;

create function reference.attachment_json(u app.uploads)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('att', u.id),
    'created_at', u.attached_at,
    'updated_at', u.updated_at,
    'url', app.public_url() || '/files/' || u.key,
    'mime_type', coalesce(u.detected_type, u.content_type),
    'filename', u.filename,
    'width', u.width,
    'height', u.height,
    'aspect_ratio', case when u.width is not null and u.height is not null then round(u.width::numeric / u.height, 4) end)
$$;

create function reference.todos_json(ids uuid[], expand_reactions boolean)
returns jsonb
language plpgsql
stable
security definer
set search_path = ''
set plan_cache_mode = force_generic_plan
as $$
declare
  viewer_id uuid := auth.uid();
  base_url text := app.public_url();
begin
  return (
    with visible_authors as materialized (
      select a.user_id from (select distinct t.user_id from app.todos t where t.id = any (ids)) a
      where app.can_see_member_content(a.user_id, viewer_id)
    ), page as materialized (
      select t.*, o.n from unnest(ids) with ordinality o(id, n)
      join app.todos t on t.id = o.id
      where t.user_id in (select va.user_id from visible_authors va)
    ), shown_reactions as materialized (
      select (l.r).todo_id, (l.r).user_id, (l.r).created_at, (l.r).id, l.r as reaction
      from page pt cross join lateral (
        -- The newest 5 reactions the viewer may see: a reactor's like is their activity, shown
        -- where their comment would be (app.can_see_comment's rule, written out on the row).
        -- The owner's and the reactor's own cases need no lookup (the bench's own-todos page).
        select r from app.reactions r
        where r.todo_id = pt.id
          and (pt.user_id = viewer_id or r.user_id = viewer_id or exists (
                 select 1 from app.users ru
                 where ru.id = r.user_id
                   and (ru.privacy = 'public'
                        or (ru.privacy = 'protected' and exists (
                              select 1 from app.user_follows f where f.follower_id = viewer_id and f.followee_id = ru.id)))))
        order by r.created_at desc, r.id desc limit 5) l(r)
      where expand_reactions
    ), people as materialized (
      select pe.id, pe.body from reference.users_json(array(
        select pt.user_id from page pt union select r.user_id from shown_reactions r)) pe
    ), owning as materialized (
      select op.id, op.body from reference.projects_json(array(
        select distinct pt.project_id from page pt where pt.project_id is not null)) op
    ), attachments as materialized (
      select a.todo_id, jsonb_agg(reference.attachment_json(a) order by a.attached_at, a.id) as body
      from app.uploads a where a.todo_id in (select pt.id from page pt) group by a.todo_id
    ), project_mentions as materialized (
      select m.todo_id, jsonb_agg(reference.mentioned_project_json_body(p, base_url) order by m.position) as body
      from app.todo_project_mentions m join app.projects p on p.id = m.project_id
      where m.todo_id in (select pt.id from page pt) and app.can_see_project(p.id, p.privacy, viewer_id)
      group by m.todo_id
    ), user_mentions as materialized (
      select m.todo_id, jsonb_agg(reference.mentioned_user_json_body(u, base_url) order by m.position) as body
      from app.todo_user_mentions m join app.users u on u.id = m.user_id
      where m.todo_id in (select pt.id from page pt) group by m.todo_id
    ), my_reactions as materialized (
      select r.todo_id, jsonb_agg(jsonb_build_object('id', app.to_public_id('reac', r.id)) order by r.created_at) as body
      from app.reactions r where r.todo_id in (select pt.id from page pt) and r.user_id = viewer_id group by r.todo_id
    ), my_comments as materialized (
      select c.todo_id, jsonb_agg(jsonb_build_object('id', app.to_public_id('comm', c.id)) order by c.created_at, c.id) as body
      from app.comments c where c.todo_id in (select pt.id from page pt) and c.user_id = viewer_id group by c.todo_id
    ), expanded as materialized (
      select r.todo_id, jsonb_agg(reference.reaction_json_body(r.reaction, ru.body) order by r.created_at desc, r.id desc) as body
      from shown_reactions r join people ru on ru.id = r.user_id group by r.todo_id
    )
    select jsonb_agg(jsonb_build_object(
        'id', app.to_public_id('todo', t.id),
        'created_at', t.created_at,
        'updated_at', t.updated_at,
        'body', t.body,
        'url', app.web_url() || '/todos/' || t.number,
        'attachments', coalesce(a.body, '[]'::jsonb),
        'creator', c.body,
        'creator_id', app.to_public_id('user', t.user_id),
        'user_id', app.to_public_id('user', t.user_id),
        'projects', case when op.body is null then '[]'::jsonb else jsonb_build_array(op.body) end,
        'mentioned_projects', coalesce(pm.body, '[]'::jsonb),
        'mentioned_users', coalesce(um.body, '[]'::jsonb),
        'reactions_count', t.reactions_count,
        'comments_count', t.comments_count,
        'viewer', jsonb_build_object('reactions', coalesce(mr.body, '[]'::jsonb), 'comments', coalesce(mc.body, '[]'::jsonb)))
      || case when expand_reactions then jsonb_build_object('reactions', coalesce(ex.body, '[]'::jsonb)) else '{}'::jsonb end
      order by t.n)
    from page t
    join people c on c.id = t.user_id
    left join owning op on op.id = t.project_id
    left join attachments a on a.todo_id = t.id
    left join project_mentions pm on pm.todo_id = t.id
    left join user_mentions um on um.todo_id = t.id
    left join my_reactions mr on mr.todo_id = t.id
    left join my_comments mc on mc.todo_id = t.id
    left join expanded ex on ex.todo_id = t.id);
end;
$$;

-- A comment as app.comment_json rendered it before app.comments_text (commit c40a629), one
-- comment at a time as jsonb under the viewer's policies, with the reference renderers above
-- for its creator, attachments and mentions.
create function reference.comment_json(c app.comments)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('comm', c.id),
    'body', c.body,
    'attachments', coalesce((
      select jsonb_agg(reference.attachment_json(a) order by a.attached_at, a.id)
      from app.uploads a where a.comment_id = c.id), '[]'::jsonb),
    'created_at', c.created_at,
    'updated_at', c.updated_at,
    'url', app.web_url() || '/todos/' || (select t.number from app.todos t where t.id = c.todo_id) || '#' || app.to_public_id('comm', c.id),
    'reactions_count', c.reactions_count,
    'viewer', jsonb_build_object('reactions', coalesce((
      select jsonb_agg(jsonb_build_object('id', app.to_public_id('reac', r.id)) order by r.created_at)
      from app.reactions r where r.comment_id = c.id and r.user_id = (select auth.uid())), '[]'::jsonb)),
    'creator', (select u.body from reference.users_json(array[c.user_id]) u),
    'mentioned_projects', coalesce((
      select jsonb_agg(reference.mentioned_project_json_body(p, app.public_url()) order by m.position)
      from app.comment_project_mentions m join app.projects p on p.id = m.project_id
      where m.comment_id = c.id), '[]'::jsonb),
    'mentioned_users', coalesce((
      select jsonb_agg(reference.mentioned_user_json_body(u, app.public_url()) order by m.position)
      from app.comment_user_mentions m join app.users u on u.id = m.user_id
      where m.comment_id = c.id), '[]'::jsonb),
    'parent_id', case when c.parent_id is not null then app.to_public_id('comm', c.parent_id) end)
$$;

-- A message as app.message_json rendered it before app.messages_text (commit 55f023b), one
-- message at a time as jsonb, with the reference renderer of users above.
create function reference.message_json(m app.messages)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('message', m.id),
    'conversation_id', app.to_public_id('conversation', m.conversation_id),
    'body', m.body,
    'client_message_id', m.client_message_id,
    'created_at', m.created_at,
    'updated_at', m.updated_at,
    'creator', (select u.body from reference.users_json(array[m.user_id]) u),
    'attachment', (
      select jsonb_build_object(
        'url', app.public_url() || '/files/' || a.key,
        'mime_type', coalesce(a.detected_type, a.content_type),
        'filename', a.filename,
        'byte_size', a.byte_size,
        'width', a.width,
        'height', a.height)
      from app.uploads a where a.message_id = m.id limit 1),
    'reactions', coalesce((
      select jsonb_agg(jsonb_build_object(
        'content', r.content,
        'created_at', r.created_at,
        'user', (select u.body from reference.users_json(array[r.user_id]) u)) order by r.created_at, r.content)
      from app.message_reactions r where r.message_id = m.id), '[]'::jsonb))
$$;

-- A conversation as app.conversation_json rendered it before app.conversation_texts (commit
-- 950c492), with the reference renderers of users and messages above.
create function reference.conversation_json(c app.conversations)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'id', app.to_public_id('conversation', c.id),
    'created_at', c.created_at,
    'updated_at', c.updated_at,
    'unread', coalesce(m.unread, false),
    'user', (select u.body from reference.users_json(array[m.other_user_id]) u),
    'last_message', (
      select reference.message_json(last)
      from app.messages last where last.conversation_id = c.id
      order by last.created_at desc, last.id desc limit 1))
  from app.conversation_members m
  where m.conversation_id = c.id and m.user_id = (select auth.uid())
$$;

grant execute on all functions in schema reference to authenticated;

-- The comments policy before 20261127180542 (app.can_see_comment per row, on the todos the
-- viewer may see): the ids of the comments it let `viewer` see, read without policies.
create function reference.comments_seen_before(viewer uuid)
returns setof uuid
language sql
stable
security definer
set search_path = ''
as $$
  select c.id from app.comments c join app.todos t on t.id = c.todo_id
  where (t.author_privacy = 'public' or t.user_id = viewer
         or (t.author_privacy = 'protected' and t.user_id in (select f.followee_id from app.user_follows f where f.follower_id = viewer)))
    and app.can_see_comment(t.user_id, c.user_id, viewer)
$$;
grant execute on function reference.comments_seen_before(uuid) to authenticated;
